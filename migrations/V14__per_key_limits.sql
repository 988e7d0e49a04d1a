-- V14: per-key monthly limits (SPEC §13).
--
-- A customer may cap one API key at `monthly_limit` units per UTC month, beside the
-- account's allowance (a contractor's or a CI job's key). Every existing key keeps no
-- limit (NULL), so nothing existing changes meaning.
--
-- What this adds:
-- * `api_key.monthly_limit`: NULL = no limit. A nullable column without a default is
--   added without rewriting the table.
-- * `key_usage_counter`: units and calls accounted per key and UTC month, bumped by the
--   accounting transaction together with `usage_counter` (so it always equals the
--   ledger's rows of that key and month). `GET /account/v1/keys` reads `used` from it.
--   To check it against the ledger:
--     SELECT c.key_id, c.month_start, c.used, sum(t.cost)
--     FROM key_usage_counter c JOIN subscription_tracking t
--       ON t.key_id = c.key_id
--      AND t.occurred_at >= c.month_start
--      AND t.occurred_at <  c.month_start + interval '1 month'
--     GROUP BY 1, 2, 3 HAVING c.used <> sum(t.cost);
-- * `key_quota_reservation`: units of limited keys reserved by gateway replicas, like
--   `quota_reservation` for hard plans: a replica takes a block under the key's row
--   lock and forwards calls through the key from it without a database round trip.
--   `granted - accounted` units are outstanding and count against the key's limit
--   until accounted or handed back; a vanished replica's rows expire.
-- * A trigger telling every replica (`NOTIFY tollgate_key_limit`, payload the key id)
--   that a key's limit changed, however it changed.
--
-- The counter is backfilled from the ledger's current month only (earlier months'
-- per-key figures are read by nothing): one read of the current month's partition.
-- The run holds `api_key` under an ACCESS EXCLUSIVE lock until commit (ADD COLUMN takes
-- it): key lookups a replica's key cache cannot answer wait that long. Measured on a
-- ledger of 1,000,000 rows in the current month over 100,000 keys: 6.8 s on a 2-core
-- machine busy with other work (most of it the backfill's grouping and its foreign-key
-- checks). Processes of the previous version still accounting after this ran do not
-- bump the per-key counters: stop them first, as for V13.

ALTER TABLE api_key ADD COLUMN monthly_limit bigint
    CONSTRAINT api_key_monthly_limit_check CHECK (monthly_limit >= 0);

CREATE TABLE key_usage_counter (
    key_id      bigint      NOT NULL REFERENCES api_key (id) ON DELETE CASCADE,
    month_start timestamptz NOT NULL,
    used        bigint      NOT NULL CHECK (used >= 0),
    calls       bigint      NOT NULL CHECK (calls >= 0),
    PRIMARY KEY (key_id, month_start)
) WITH (fillfactor = 70);

INSERT INTO key_usage_counter (key_id, month_start, used, calls)
SELECT t.key_id,
       date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
       sum(t.cost),
       count(*)
FROM subscription_tracking t
JOIN api_key k ON k.id = t.key_id
WHERE t.occurred_at >= date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
GROUP BY t.key_id;

CREATE TABLE key_quota_reservation (
    key_id      bigint      NOT NULL REFERENCES api_key (id) ON DELETE CASCADE,
    month_start timestamptz NOT NULL,
    replica     uuid        NOT NULL,
    granted     bigint      NOT NULL CHECK (granted >= 0),
    accounted   bigint      NOT NULL DEFAULT 0 CHECK (accounted >= 0),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (key_id, month_start, replica)
);

CREATE FUNCTION api_key_notify_limit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tollgate_key_limit', NEW.id::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER api_key_limit_changed
    AFTER UPDATE OF monthly_limit ON api_key
    FOR EACH ROW
    WHEN (NEW.monthly_limit IS DISTINCT FROM OLD.monthly_limit)
    EXECUTE FUNCTION api_key_notify_limit();
