-- V1: customer accounts, their API keys and their login sessions.
--
-- Emails are unique case-insensitively. Secrets are never stored in clear:
-- passwords as argon2id PHC strings, API keys and session tokens as the SHA-256
-- of the full token. `api_key.prefix` is the first characters of the key, kept
-- so a customer can tell keys apart in listings.

CREATE TABLE account (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email         text        NOT NULL,
    password_hash text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Signup maps a violation of this index to 409 EMAIL_TAKEN.
CREATE UNIQUE INDEX account_email_key ON account (lower(email));

CREATE TABLE api_key (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    key_hash   bytea       NOT NULL,
    prefix     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Set once by revocation; a revoked key is refused from then on.
    revoked_at timestamptz
);

-- Every proxied call authenticates with one lookup on this index; INCLUDE lets
-- it answer from the index alone.
CREATE UNIQUE INDEX api_key_hash_key ON api_key (key_hash) INCLUDE (account_id, revoked_at);
CREATE INDEX api_key_account_idx ON api_key (account_id);

CREATE TABLE account_session (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    token_hash bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE UNIQUE INDEX account_session_token_key ON account_session (token_hash);
-- Lets an operator purge expired sessions cheaply:
--   DELETE FROM account_session WHERE expires_at < now();
CREATE INDEX account_session_expiry_idx ON account_session (expires_at);
