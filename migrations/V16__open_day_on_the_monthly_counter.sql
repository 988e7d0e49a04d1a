-- V16: the day being counted lives on the monthly counter row, so a batch writes one
-- counter row per account instead of two.
--
-- Until now every batch updated two rows per account: `usage_counter` (the month) and
-- `usage_daily` (the day), each its own heap tuple, WAL record and index lookup. Now
-- `usage_counter` also holds its account's *open day*: `day_start` and that day's
-- `day_calls` and `day_used`, bumped in the same UPDATE as `used`. When an account's
-- first event of a later day arrives, the open day's figures move to
-- `usage_daily_closed` (the old `usage_daily` table, renamed) and the row opens the new
-- day: one insert per account and day, where there was one update per account and
-- batch. An event of a day older than the open one (a backlog drained late) is added to
-- `usage_daily_closed` directly.
--
-- Readers keep reading `usage_daily`, now a view: the closed days and the open ones,
-- summed per account and day, so a day is right wherever its figures sit. Nothing
-- existing is rewritten: the new columns have constant defaults, old rows keep no open
-- day (`day_start` NULL) and their days stay where they were. `usage_counter` is read
-- once under its lock (the new checks, the index), which holds accounting until commit.
-- Stop processes of the previous version that account usage first: they write
-- `usage_daily` by its old name, which is now a view.

ALTER TABLE usage_daily RENAME TO usage_daily_closed;
ALTER INDEX usage_daily_day_idx RENAME TO usage_daily_closed_day_idx;

ALTER TABLE usage_counter
    ADD COLUMN day_start timestamptz,
    ADD COLUMN day_calls bigint NOT NULL DEFAULT 0
        CONSTRAINT usage_counter_day_calls_check CHECK (day_calls >= 0),
    ADD COLUMN day_used bigint NOT NULL DEFAULT 0
        CONSTRAINT usage_counter_day_used_check CHECK (day_used >= 0);

-- The overview's calls per day over every account reads the open days by day. A row's
-- `day_start` changes once a day; its figures' updates still stay on the page (HOT).
CREATE INDEX usage_counter_day_idx ON usage_counter (day_start) WHERE day_start IS NOT NULL;

CREATE VIEW usage_daily AS
SELECT account_id, day_start, sum(calls)::bigint AS calls, sum(used)::bigint AS used
FROM (
    SELECT account_id, day_start, calls, used FROM usage_daily_closed
    UNION ALL
    SELECT account_id, day_start, day_calls, day_used FROM usage_counter
    WHERE day_start IS NOT NULL
) AS days
GROUP BY account_id, day_start;
