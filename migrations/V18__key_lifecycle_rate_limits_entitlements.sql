-- V18: key lifecycle, rate limits per second and plan features (SPEC §15–17).
--
-- What this adds:
-- * `api_key.name` (every existing key is named `default`, as signup's key is),
--   `expires_at` (NULL = never), `scopes` (the proxied prefixes the key may call;
--   NULL = all of them), `last_used_at` (the last proxied call through it, written by
--   each replica at most every 30 s), `rate_per_second` / `rate_burst` (the key's own
--   rate limit; both NULL = none) and `replaces` (the key this one was rolled from).
-- * `subscription.features`, `rate_per_second`, `rate_burst`: what the subscription
--   entitles the account to besides units. A catalogue plan's are copied in when the
--   subscription is activated, so a later change of the catalogue does not change
--   subscriptions already active. Existing subscriptions get no features and no rate
--   limit; the free grant's come from the configuration (`usage.free_features`,
--   `usage.free_rate_limit`), whatever its row says.
-- * `replica_presence`: each running gateway's heartbeat, so every replica knows how
--   many share the fleet's rate limits.
-- * The V5 trigger now also fires when a key's expiry, scopes or rate limit change, so
--   every replica's key cache drops the key and reads it again on its next call.
--
-- Columns with constant defaults are added without rewriting the table.

ALTER TABLE api_key
    ADD COLUMN name text NOT NULL DEFAULT 'default'
        CONSTRAINT api_key_name_check CHECK (char_length(name) BETWEEN 1 AND 64),
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN scopes text[],
    ADD COLUMN last_used_at timestamptz,
    ADD COLUMN rate_per_second integer,
    ADD COLUMN rate_burst integer,
    ADD COLUMN replaces bigint REFERENCES api_key (id) ON DELETE SET NULL,
    ADD CONSTRAINT api_key_rate_limit_check CHECK (
        (rate_per_second IS NULL) = (rate_burst IS NULL)
        AND (rate_per_second IS NULL OR (rate_per_second > 0 AND rate_burst >= rate_per_second)));

ALTER TABLE subscription
    ADD COLUMN features text[] NOT NULL DEFAULT '{}',
    ADD COLUMN rate_per_second integer,
    ADD COLUMN rate_burst integer,
    ADD CONSTRAINT subscription_rate_limit_check CHECK (
        (rate_per_second IS NULL) = (rate_burst IS NULL)
        AND (rate_per_second IS NULL OR (rate_per_second > 0 AND rate_burst >= rate_per_second)));

CREATE TABLE replica_presence (
    replica uuid        PRIMARY KEY,
    seen_at timestamptz NOT NULL
);

DROP TRIGGER api_key_revoked ON api_key;

CREATE TRIGGER api_key_changed
    AFTER UPDATE OF revoked_at, key_hash, expires_at, scopes, rate_per_second, rate_burst
    ON api_key
    FOR EACH ROW
    WHEN (NEW.revoked_at IS DISTINCT FROM OLD.revoked_at
          OR NEW.key_hash IS DISTINCT FROM OLD.key_hash
          OR NEW.expires_at IS DISTINCT FROM OLD.expires_at
          OR NEW.scopes IS DISTINCT FROM OLD.scopes
          OR NEW.rate_per_second IS DISTINCT FROM OLD.rate_per_second
          OR NEW.rate_burst IS DISTINCT FROM OLD.rate_burst)
    EXECUTE FUNCTION api_key_notify_revocation();
