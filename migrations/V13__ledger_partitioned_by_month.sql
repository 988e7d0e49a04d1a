-- V13: the ledger partitioned by UTC month, with one index.
--
-- `subscription_tracking` becomes RANGE-partitioned by `occurred_at`, one partition per
-- UTC month named `subscription_tracking_y<YYYY>m<MM>`. An old month leaves in one
-- statement (see docs/operating.md), and an insert only ever touches the current month's
-- partition and its single index, however large the ledger grows.
--
-- What changed:
-- * No `id` column: nothing read it, and its index was one more entry per call.
-- * ONE unique index, the primary key (account_id, occurred_at, transaction_id), serves
--   both dedup and history (an account's calls in a time range). It replaces
--   UNIQUE (transaction_id) and the (account_id, occurred_at) index. A redelivered usage
--   event carries the same transaction id, account and occurred_at as its first delivery,
--   so it is still recorded once (`ON CONFLICT` on this key). What the database no longer
--   enforces is that two *different* events never share a transaction id: the id is the
--   gateway's random request UUID, so that holds by construction, not by an index.
-- * No foreign key to `account`: a foreign key checks every inserted row against
--   `account` (a lookup and a KEY SHARE lock per call: 1,000-row batches took 45-67 ms
--   with it against 30-44 ms without, measured here). Deleting an account still removes
--   its rows, through the statement trigger `account_ledger_cascade`. The listener inserts
--   rows only for accounts it holds row-locked, so a row never outlives its account; a
--   row inserted by hand for an account that does not exist is no longer refused. The
--   legacy partition (below) keeps its old foreign key: dropping it would take an ACCESS
--   EXCLUSIVE lock on `account`, which would deadlock with the listener (see
--   docs/operating.md to drop it later).
-- * Partitions are made by `subscription_tracking_add_month(timestamptz)`. Every process
--   that accounts usage creates the current and next month's partitions at startup and
--   hourly, and an event whose month has none (e.g. a late event for a month an operator
--   detached) gets one made on demand, so no event is refused. A row inserted by hand
--   into a month without a partition lands in the DEFAULT partition
--   `subscription_tracking_default`, and moves to its month's partition when that is
--   made.
--
-- Every existing row is kept and none is rewritten: the old table, without its `id`
-- column and its two indexes, is attached as the partition `subscription_tracking_legacy`
-- covering everything up to the end of the month of its newest row (at least the current
-- month); later months get partitions of their own. A database with an empty ledger drops
-- the old table instead. The run reads the old table three times (its newest row, the new
-- primary key's build, ATTACH's check of the range) under an ACCESS EXCLUSIVE lock on it,
-- which blocks the ledger's reads and writes until commit, and holds `account` against
-- writes (signups, deletions) as long. Measured on 10 million rows (2.1 GB): 8 s on a
-- quiet machine, 12 s on a busy one (of which 8.7 s built the index). A CHECK constraint added NOT VALID then validated would
-- let ATTACH skip its scan, but in one transaction it costs the same scan (1.5 s either
-- way), so ATTACH checks. Stop every process of the previous version that accounts
-- usage before running this: its insert names the unique key dropped here
-- (docs/operating.md, "Upgrading to V13").

-- Deleting accounts deletes their calls (what the foreign key's ON DELETE CASCADE did),
-- once per DELETE statement, through each partition's primary key. Created first:
-- the trigger locks `account` against writes (SHARE ROW EXCLUSIVE; reads and the
-- listener's row locks go on) until commit, and taking it before the ledger's lock
-- keeps the order every writer uses (account, then ledger), so nothing deadlocks.
CREATE FUNCTION subscription_tracking_forget_accounts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM subscription_tracking t USING deleted d WHERE t.account_id = d.id;
    RETURN NULL;
END $$;

CREATE TRIGGER account_ledger_cascade
    AFTER DELETE ON account
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION subscription_tracking_forget_accounts();

ALTER TABLE subscription_tracking RENAME TO subscription_tracking_legacy;
ALTER TABLE subscription_tracking_legacy
    DROP COLUMN id,
    DROP CONSTRAINT subscription_tracking_transaction_key;
DROP INDEX subscription_tracking_account_time_idx;

CREATE TABLE subscription_tracking (
    transaction_id  uuid        NOT NULL,
    account_id      bigint      NOT NULL,
    subscription_id bigint,
    key_id          bigint,
    occurred_at     timestamptz NOT NULL,
    method          text        NOT NULL,
    route           text        NOT NULL,
    upstream_status smallint    NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    cost            bigint      NOT NULL DEFAULT 1
        CONSTRAINT subscription_tracking_cost_check CHECK (cost >= 0),
    CONSTRAINT subscription_tracking_pkey PRIMARY KEY (account_id, occurred_at, transaction_id)
) PARTITION BY RANGE (occurred_at);

-- The partition of the UTC month holding `at`, created when missing; returns its name, or
-- NULL when another partition (the legacy one) already covers that month. Safe to call
-- concurrently and repeatedly. A month's table that exists but is not attached (an
-- operator detached it and kept it) is left alone and the month gets a new partition
-- under the next free name (`..._2`, `..._3`, ...).
CREATE FUNCTION subscription_tracking_add_month(at timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    month_start timestamp := date_trunc('month', at AT TIME ZONE 'UTC');
    base text := 'subscription_tracking_' || to_char(month_start, '"y"YYYY"m"MM');
    name text;
    found_rel oid;
    attached boolean;
    attempt int := 1;
    lo timestamptz := month_start AT TIME ZONE 'UTC';
    hi timestamptz := (month_start + interval '1 month') AT TIME ZONE 'UTC';
BEGIN
    FOR look IN 1..40 LOOP
        name := CASE WHEN attempt = 1 THEN base ELSE base || '_' || attempt END;
        -- The catalog is read by a query, not through the session's cached name lookup,
        -- so a partition another session has just made is seen.
        SELECT c.oid, EXISTS (SELECT 1 FROM pg_inherits i
                              WHERE i.inhrelid = c.oid
                                AND i.inhparent = 'subscription_tracking'::regclass)
          INTO found_rel, attached
          FROM pg_class c
         WHERE c.relname = name
           AND c.relnamespace = (SELECT relnamespace FROM pg_class
                                 WHERE oid = 'subscription_tracking'::regclass);
        IF found_rel IS NULL THEN
            -- Creators wait for each other; the loser finds the winner's partition.
            PERFORM pg_advisory_xact_lock(hashtext('subscription_tracking_add_month'));
            BEGIN
                IF EXISTS (SELECT 1 FROM subscription_tracking_default
                           WHERE occurred_at >= lo AND occurred_at < hi) THEN
                    -- Rows of this month wait in the default partition (inserted by hand):
                    -- they move into the month's own table, which is then attached.
                    EXECUTE format('CREATE TABLE %I (LIKE subscription_tracking
                                        INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
                    EXECUTE format('WITH moved AS (DELETE FROM subscription_tracking_default
                                                   WHERE occurred_at >= %L AND occurred_at < %L
                                                   RETURNING *)
                                    INSERT INTO %I SELECT * FROM moved', lo, hi, name);
                    EXECUTE format('ALTER TABLE subscription_tracking ATTACH PARTITION %I
                                        FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
                ELSE
                    EXECUTE format('CREATE TABLE %I PARTITION OF subscription_tracking
                                        FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
                END IF;
                RETURN name;
            EXCEPTION
                -- "would overlap partition ...": another partition covers the month.
                WHEN invalid_object_definition THEN RETURN NULL;
                -- Made meanwhile by another session, or a row of the month reached the
                -- default partition meanwhile: look again.
                WHEN duplicate_table OR unique_violation OR check_violation THEN NULL;
            END;
        ELSIF attached THEN
            RETURN name;
        ELSE
            attempt := attempt + 1;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'no free name for the ledger partition of %', month_start;
END $$;

-- The old rows: attached as one partition when there are any.
DO $$
DECLARE
    upper_bound timestamptz;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM subscription_tracking_legacy) THEN
        DROP TABLE subscription_tracking_legacy;
        RETURN;
    END IF;
    -- The end of the month of the newest row, at least the end of this month.
    SELECT (date_trunc('month', greatest(max(occurred_at), now()) AT TIME ZONE 'UTC')
            + interval '1 month') AT TIME ZONE 'UTC'
      INTO upper_bound
      FROM subscription_tracking_legacy;
    ALTER TABLE subscription_tracking_legacy
        ADD CONSTRAINT subscription_tracking_legacy_pkey
        PRIMARY KEY (account_id, occurred_at, transaction_id);
    EXECUTE format('ALTER TABLE subscription_tracking ATTACH PARTITION subscription_tracking_legacy
                        FOR VALUES FROM (MINVALUE) TO (%L)', upper_bound);
END $$;

-- Rows of a month that has no partition of its own (inserted by hand, or a late event for
-- a month an operator detached) are kept here rather than refused. The gateway makes
-- each month's partition before it accounts that month, so in use this stays empty;
-- `subscription_tracking_add_month` moves any rows it holds for a month into that
-- month's new partition.
CREATE TABLE subscription_tracking_default PARTITION OF subscription_tracking DEFAULT;

SELECT subscription_tracking_add_month(now());
SELECT subscription_tracking_add_month(
    (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC');

-- Counter rows are updated once per batch and account. Room left on their pages lets
-- PostgreSQL update them in place (HOT: no new index entries); pages written from now on
-- keep 30 % free, nothing is rewritten.
ALTER TABLE usage_counter SET (fillfactor = 70);
ALTER TABLE usage_daily SET (fillfactor = 70);
