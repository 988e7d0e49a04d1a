-- V15: usage leaves the gateway (SPEC §14): Stripe meter export windows, each account's
-- export cursor, the exporter's lease, and the units top-up credit paid for per month
-- (a column of the CSV export).
--
-- Nothing existing changes meaning. Adding columns with constant defaults rewrites no
-- table. Accounts that already have a Stripe customer start exporting from the units
-- accounted after this migration: their history is not billed.

-- Units of the month's use that top-up credit paid for, bumped by the ledger in the
-- same transaction as `used`, only when a batch spends credit.
ALTER TABLE usage_counter ADD COLUMN credits_spent bigint NOT NULL DEFAULT 0
    CONSTRAINT usage_counter_credits_spent_check CHECK (credits_spent >= 0);

-- Where each account's export stands, in units accounted over its whole life: the sum
-- of its `usage_counter.used` over every month. That sum only grows, and it grows in
-- the transaction that records the ledger rows, whatever month they belong to (a late
-- event of last month included), so "units since the last export" is the difference
-- between the sum now and `exported_units`: nothing accounted late is missed, nothing
-- is counted twice. `exported_units` moves only when Stripe accepted the window that
-- ends there; `exported_at` is that window's end (or when the baseline was taken).
-- `checked_at` paces the exporter: an account is looked at once per
-- `billing.meter_interval_s`.
CREATE TABLE meter_cursor (
    account_id     bigint      PRIMARY KEY REFERENCES account (id) ON DELETE CASCADE,
    exported_units bigint      NOT NULL CHECK (exported_units >= 0),
    exported_at    timestamptz NOT NULL,
    checked_at     timestamptz
);

-- One Stripe meter event per row: the units [units_from, units_to) of one account,
-- accounted between `from_at` and `to_at`. The row, with its `identifier`, is written
-- before the first attempt and every retry sends the same one (Stripe deduplicates on
-- it). status: 'pending' (being tried; at most one per account), 'sent' (Stripe
-- accepted it, the cursor moved to `units_to`), 'failed' (Stripe refused it with a 4xx
-- other than 429; `last_error` holds Stripe's message; the cursor did not move, so the
-- same units go out again in the account's next window, under a new identifier).
-- Finished rows may be pruned; nothing reads them but the admin list.
CREATE TABLE meter_window (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id      bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    identifier      text        NOT NULL UNIQUE,
    customer        text        NOT NULL,
    units_from      bigint      NOT NULL,
    units_to        bigint      NOT NULL,
    from_at         timestamptz NOT NULL,
    to_at           timestamptz NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
        CONSTRAINT meter_window_status_check CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_error      text,
    finished_at     timestamptz,
    CONSTRAINT meter_window_units_check CHECK (units_to > units_from AND units_from >= 0)
);

-- At most one window of an account is open: the next one starts where it ends.
CREATE UNIQUE INDEX meter_window_pending_idx ON meter_window (account_id)
    WHERE status = 'pending';
-- The exporter's due list.
CREATE INDEX meter_window_due_idx ON meter_window (next_attempt_at) WHERE status = 'pending';
-- An account's windows, newest first (GET /admin/v1/accounts/{id}/exports).
CREATE INDEX meter_window_account_idx ON meter_window (account_id, id);

-- Which process exports: a single row, as `notification_lease` is for webhooks. The
-- holder renews it every round; a stopped process gives it up, a dead one lets it
-- expire and the next process to look takes over.
CREATE TABLE meter_export_lease (
    id         boolean     PRIMARY KEY DEFAULT true CHECK (id),
    holder     uuid        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- An account's export starts when it gets its first Stripe customer: the cursor is set
-- to the units accounted until then, read under the account's row lock (the lock the
-- ledger takes), so the units of that instant are exactly the ones not billed.
CREATE FUNCTION meter_cursor_start() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM account WHERE id = NEW.account_id FOR UPDATE;
    INSERT INTO meter_cursor (account_id, exported_units, exported_at)
    SELECT NEW.account_id, coalesce(sum(used), 0), now()
      FROM usage_counter WHERE account_id = NEW.account_id
    ON CONFLICT (account_id) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER stripe_customer_meter_cursor
    AFTER INSERT ON stripe_customer
    FOR EACH ROW EXECUTE FUNCTION meter_cursor_start();

-- Customers known before this migration start from what is accounted now.
INSERT INTO meter_cursor (account_id, exported_units, exported_at)
SELECT k.account_id, coalesce((SELECT sum(used) FROM usage_counter u
                               WHERE u.account_id = k.account_id), 0), now()
  FROM (SELECT DISTINCT account_id FROM stripe_customer) k
ON CONFLICT (account_id) DO NOTHING;
