-- V8: redemption codes, so catalogue plans reach customers without an operator
-- (SPEC §11). The catalogue itself lives in configuration (`[[plans]]`), not here: a
-- subscription keeps a copy of its figures, so editing the catalogue never changes a
-- subscription already granted. Only a new table: nothing existing changes meaning.

-- Codes an operator minted (`POST /admin/v1/codes`). Only the SHA-256 of a code is
-- kept, like API keys; the clear code was shown once, to the operator. A code carries
-- the catalogue plan's figures as they were when it was minted, so what it grants is
-- what was sold, whatever the catalogue says later. A code is used at most once:
-- redemption sets `used_at` with `UPDATE ... WHERE used_at IS NULL`, in the same
-- transaction as the subscription it grants.
CREATE TABLE redemption_code (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code_hash         bytea       NOT NULL,
    plan              text        NOT NULL,
    monthly_allowance bigint      NOT NULL CHECK (monthly_allowance >= 0),
    daily_allowance   bigint      CHECK (daily_allowance >= 0),
    enforcement       text        NOT NULL CHECK (enforcement IN ('soft', 'hard')),
    -- The subscription runs [redeemed, redeemed + months) in calendar months.
    months            integer     NOT NULL CHECK (months >= 1),
    -- NULL: the code never expires. Past it the code is refused (410 CODE_EXPIRED).
    expires_at        timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    used_at           timestamptz,
    used_by           bigint      REFERENCES account (id) ON DELETE SET NULL,
    subscription_id   bigint      REFERENCES subscription (id) ON DELETE SET NULL,
    CONSTRAINT redemption_code_hash_key UNIQUE (code_hash)
);
