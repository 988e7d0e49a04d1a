-- V3: monthly allowances and their per-month quota snapshots.
--
-- Each subscription gets its own monthly allowance. Rows that existed before
-- this migration were all on the historical 3,000-call plan, so they get 3,000.

ALTER TABLE subscription ADD COLUMN monthly_allowance bigint NOT NULL DEFAULT 3000;
-- New rows must say their allowance.
ALTER TABLE subscription ALTER COLUMN monthly_allowance DROP DEFAULT;
ALTER TABLE subscription ADD CONSTRAINT subscription_allowance_check CHECK (monthly_allowance >= 0);

-- Quota snapshots: one row per subscription and UTC month (month_start is
-- 00:00 UTC on the 1st), holding the allowance that month was granted. Rows are
-- written at signup and subscription activation for the current month, and
-- lazily by the usage listener for later months. No carry-forward: each month
-- stands alone.
CREATE TABLE monthly_usage (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id      bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    subscription_id bigint      NOT NULL REFERENCES subscription (id) ON DELETE CASCADE,
    month_start     timestamptz NOT NULL,
    allowance       bigint      NOT NULL CHECK (allowance >= 0),
    is_free         boolean     NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT monthly_usage_subscription_month_key UNIQUE (subscription_id, month_start)
);

-- At most one free grant per account and month, whatever races to write it.
CREATE UNIQUE INDEX monthly_usage_one_free_grant ON monthly_usage (account_id, month_start) WHERE is_free;

-- Accounts created before this migration get their free subscription now, so
-- every account has one; their monthly grants follow lazily.
INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
SELECT a.id, 'free', a.created_at, 3000
FROM account a
WHERE NOT EXISTS (SELECT 1 FROM subscription s WHERE s.account_id = a.id AND s.plan = 'free');
