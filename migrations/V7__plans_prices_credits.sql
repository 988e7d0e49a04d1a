-- V7: plans customers can see and operators can shape: daily allowances, hard
-- enforcement, priced calls, top-up credits and the per-day usage series.
--
-- Every existing row keeps its meaning: existing subscriptions are soft with no daily
-- allowance, every existing call cost one unit, so `usage_counter.used` (now a sum of
-- costs) is unchanged. Adding columns with constant defaults rewrites nothing, so this
-- runs in moments on a large ledger; only the `usage_daily` backfill reads the ledger
-- once.

-- A second cap per UTC day (a limit, not extra units); NULL = none.
ALTER TABLE subscription ADD COLUMN daily_allowance bigint
    CONSTRAINT subscription_daily_allowance_check CHECK (daily_allowance >= 0);
-- 'soft': exhausted accounts are throttled by the admission hash (the seed's rule).
-- 'hard': exhausted accounts are refused (429 QUOTA_EXCEEDED) and never forwarded.
ALTER TABLE subscription ADD COLUMN enforcement text NOT NULL DEFAULT 'soft'
    CONSTRAINT subscription_enforcement_check CHECK (enforcement IN ('soft', 'hard'));

-- What one call cost, in units (route price, or the upstream's own figure).
ALTER TABLE subscription_tracking ADD COLUMN cost bigint NOT NULL DEFAULT 1
    CONSTRAINT subscription_tracking_cost_check CHECK (cost >= 0);

-- Calls and units per account and UTC day, bumped in the ledger's transaction like
-- `usage_counter`: the daily window's figure and the operators' per-day series.
--   calls = ledger rows of that day, used = the sum of their costs.
CREATE TABLE usage_daily (
    account_id bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    day_start  timestamptz NOT NULL,
    calls      bigint      NOT NULL CHECK (calls >= 0),
    used       bigint      NOT NULL CHECK (used >= 0),
    PRIMARY KEY (account_id, day_start)
);

-- The overview's calls per day over every account reads this index.
CREATE INDEX usage_daily_day_idx ON usage_daily (day_start);

INSERT INTO usage_daily (account_id, day_start, calls, used)
SELECT account_id,
       date_trunc('day', occurred_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
       count(*),
       count(*)
FROM subscription_tracking
GROUP BY 1, 2;

-- One-off top-ups. Credit is spent only once the month's allowance is used up,
-- earliest expiry first (NULL = never expires, spent last); what is left carries over
-- months until it expires. `remaining` only ever goes down, in the ledger's
-- transaction, by the units of newly inserted ledger rows (so a redelivered event
-- spends nothing).
CREATE TABLE credit_grant (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    calls      bigint      NOT NULL CHECK (calls > 0),
    remaining  bigint      NOT NULL CHECK (remaining >= 0 AND remaining <= calls),
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX credit_grant_account_idx ON credit_grant (account_id);

-- Units of hard-enforced plans reserved by gateway replicas: each replica takes a
-- block of units under the account's row lock and forwards calls from it without a
-- database round trip. `granted - accounted` units are outstanding (reserved or in
-- flight) and count against the allowance until the ledger accounts them or the
-- replica hands them back. A replica that vanishes leaves its rows to expire.
CREATE TABLE quota_reservation (
    account_id bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    replica    uuid        NOT NULL,
    day_start  timestamptz NOT NULL,
    granted    bigint      NOT NULL CHECK (granted >= 0),
    accounted  bigint      NOT NULL DEFAULT 0 CHECK (accounted >= 0),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (account_id, day_start, replica)
);
