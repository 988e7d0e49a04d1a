-- V4: the per-account monthly call counter.
--
-- `used` for an account and month is read from here, not counted from the
-- ledger, so accounting costs the same whatever an account's volume. The usage
-- listener increments it in the same transaction as the ledger inserts, so it
-- always equals the ledger's row count for that account and month. To check:
--   SELECT c.account_id, c.month_start, c.used, count(t.id)
--   FROM usage_counter c LEFT JOIN subscription_tracking t
--     ON t.account_id = c.account_id
--    AND t.occurred_at >= c.month_start
--    AND t.occurred_at <  c.month_start + interval '1 month'
--   GROUP BY 1, 2, 3 HAVING c.used <> count(t.id);

CREATE TABLE usage_counter (
    account_id  bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    month_start timestamptz NOT NULL,
    used        bigint      NOT NULL CHECK (used >= 0),
    PRIMARY KEY (account_id, month_start)
);

-- Reconciliation pages through one month's counters.
CREATE INDEX usage_counter_month_idx ON usage_counter (month_start, account_id);

-- Backfill from any ledger rows recorded before this migration.
INSERT INTO usage_counter (account_id, month_start, used)
SELECT account_id,
       date_trunc('month', occurred_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
       count(*)
FROM subscription_tracking
GROUP BY 1, 2;
