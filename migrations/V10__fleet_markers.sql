-- V10: one Cloudflare call budget and one KV listing for the whole fleet (SPEC §8).
--
-- Cloudflare counts API calls per token, for every process that uses it (about 1,200
-- per 5 minutes; past that the token is blocked for 5 minutes and throttling fails open
-- everywhere). Every `serve` replica and every `worker` on this database shares, through
-- the three tables below:
--
--   kv_budget     the calls made on each API token in the last budget window;
--   fleet_lister  the lease of the one process that lists KV, and the listing schedule;
--   fleet_marker  the fleet's current exhaustion markers, which every replica's marker
--                 view follows (LISTEN tollgate_fleet_marker).
--
-- All three are caches of Cloudflare state, never a source of truth: PostgreSQL's usage
-- tables decide who is exhausted, KV holds the markers. Truncating any of them is safe
-- (the budget forgets its window, the next listing refills fleet_marker).

-- One row per API token (`token_id` = the first 16 hex digits of the token's SHA-256,
-- never the token). `granted` holds when each call of the last window was allowed; a
-- process appends to it with one UPDATE … RETURNING before every Cloudflare call, and
-- only while fewer than `throttle.kv_call_budget` stamps are younger than
-- `throttle.kv_budget_window_ms`. To see what the fleet spent in the last 5 minutes:
--   SELECT token_id, (SELECT count(*) FROM unnest(granted) g WHERE g > now() - interval '5 minutes')
--   FROM kv_budget;
CREATE TABLE kv_budget (
    token_id text PRIMARY KEY,
    granted  timestamptz[] NOT NULL DEFAULT '{}'
);

-- The lister's lease: a single row. The process named by `holder` lists KV while
-- `expires_at` is in the future and renews it every `throttle.refresh_interval_ms`; a
-- stopped process gives it up at once, a dead one lets it expire and another takes
-- over. The schedule lives here too, so a new lister keeps the old one's pace:
-- `next_listing_at` is stretched as the marker count grows (`listing_pages` pages per
-- listing), so listings never take more than half of the call budget. `last_listed_at`
-- is the last listing that succeeded; replica views are trusted for a while after it.
CREATE TABLE fleet_lister (
    id              boolean PRIMARY KEY DEFAULT true CHECK (id),
    holder          uuid NOT NULL,
    expires_at      timestamptz NOT NULL,
    next_listing_at timestamptz,
    last_listed_at  timestamptz,
    listing_pages   integer NOT NULL DEFAULT 0,
    interval_ms     bigint NOT NULL DEFAULT 0
);

-- The fleet's markers: `kind` 'month' for `usage-exhausted:<account_id>:<period_start_unix>`,
-- 'day' for `usage-exhausted-daily:<account_id>:<period_start_unix>`. A row with `marked`
-- false is a tombstone: the marker was removed (an upgrade, a reconciliation) and a KV
-- listing that may lag the delete must not bring it back. `changed_by` says who wrote
-- the row last: 'exhaust', 'restore', 'reconcile' (a replica, right after the KV call)
-- or 'listing' (the lister, from what KV holds). Rows of past months and days, and
-- tombstones older than an hour, are deleted by the lister. No foreign key: a marker
-- written outside the fleet may name any account.
CREATE TABLE fleet_marker (
    kind              text NOT NULL CHECK (kind IN ('month', 'day')),
    period_start_unix bigint NOT NULL,
    account_id        bigint NOT NULL,
    marked            boolean NOT NULL,
    changed_at        timestamptz NOT NULL DEFAULT now(),
    changed_by        text NOT NULL,
    PRIMARY KEY (kind, period_start_unix, account_id)
);

-- Every change to fleet_marker is notified on channel `tollgate_fleet_marker` when its
-- transaction commits, whoever makes it (a replica, the lister, an operator by hand):
-- one `<kind>:<account_id>:<period_start_unix>:<1|0>` per row, or a single `reload`
-- when a statement changed more than 1,000 rows (replicas then read the table again).
-- The lister also notifies `listed:<interval_ms>` after each good listing. To throttle
-- or release an account by hand on every replica at once (KV itself is not touched):
--   INSERT INTO fleet_marker (kind, period_start_unix, account_id, marked, changed_by)
--   VALUES ('month', <month start unix>, <account id>, true, 'operator')
--   ON CONFLICT (kind, period_start_unix, account_id)
--   DO UPDATE SET marked = EXCLUDED.marked, changed_at = now(), changed_by = 'operator';
CREATE FUNCTION fleet_marker_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changes bigint;
    r record;
BEGIN
    SELECT count(*) INTO changes FROM changed;
    IF changes > 1000 THEN
        PERFORM pg_notify('tollgate_fleet_marker', 'reload');
        RETURN NULL;
    END IF;
    FOR r IN SELECT kind, account_id, period_start_unix, marked FROM changed LOOP
        PERFORM pg_notify('tollgate_fleet_marker', concat_ws(':', r.kind, r.account_id,
            r.period_start_unix, CASE WHEN TG_OP <> 'DELETE' AND r.marked THEN 1 ELSE 0 END));
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE TRIGGER fleet_marker_inserted
    AFTER INSERT ON fleet_marker
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION fleet_marker_notify();

CREATE TRIGGER fleet_marker_updated
    AFTER UPDATE ON fleet_marker
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION fleet_marker_notify();

CREATE TRIGGER fleet_marker_deleted
    AFTER DELETE ON fleet_marker
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION fleet_marker_notify();
