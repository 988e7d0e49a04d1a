-- V19: usage analytics per route, key and day (SPEC §18), in place of the per-key
-- monthly counter.
--
-- What this adds:
-- * `usage_rollup`: one row per key, UTC day and route, with the calls, units, upstream
--   5xx answers and a latency histogram of the calls accounted there. The accounting
--   transaction adds each batch's calls to it together with the ledger rows (it takes
--   the place of V14's `key_usage_counter`, so a batch writes no more rows than
--   before), so its sums always equal the ledger:
--     SELECT r.key_id, sum(r.calls), count(t.*) ... -- see docs/operating.md
--   `route` is the longest prefix among `pricing.routes` and `entitlements.routes`, else
--   the path's first three segments (`/vedic/v1/chart`), else `other` past
--   `analytics.max_routes` distinct routes of the account in the month.
--   `latency` counts calls per bucket of upstream latency (request sent to response
--   head): bucket 0 holds calls under 100 µs, bucket i ≥ 1 those in
--   [100 µs · 1.04^(i-1), 100 µs · 1.04^i), the last (399, about ten minutes) everything
--   slower. Trailing empty buckets are not stored. `usage_hist_add` adds two histograms.
-- * `usage_route`: the routes each account has used in a month (the bound's memory).
--
-- The rollup is filled from the ledger since the first day of the month 93 days ago (the
-- longest range analytics answers; latencies of those calls are not known, so their
-- histograms stay empty), then `key_usage_counter` is dropped. It reads that much of the
-- ledger once: on a ledger of 10,000,000 rows a month, expect minutes, during which
-- accounting waits (the ledger's partitions are read, not locked against reads). Processes of
-- the previous version still accounting after this ran fail their batches (the table is
-- gone) and retry them after the upgrade: stop them first, as for V13.

CREATE FUNCTION usage_hist_add(a integer[], b integer[]) RETURNS integer[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i), '{}')
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i)
$$;

CREATE TABLE usage_rollup (
    key_id     bigint    NOT NULL REFERENCES api_key (id) ON DELETE CASCADE,
    day        date      NOT NULL,
    route      text      NOT NULL,
    account_id bigint    NOT NULL,
    calls      bigint    NOT NULL CHECK (calls >= 0),
    units      bigint    NOT NULL CHECK (units >= 0),
    errors     bigint    NOT NULL CHECK (errors >= 0),
    latency    integer[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (key_id, day, route)
) WITH (fillfactor = 70);

-- The account's analytics over a range of days.
CREATE INDEX usage_rollup_account_day ON usage_rollup (account_id, day);

CREATE TABLE usage_route (
    account_id  bigint NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    month_start date   NOT NULL,
    route       text   NOT NULL,
    PRIMARY KEY (account_id, month_start, route)
);

INSERT INTO usage_rollup (key_id, day, route, account_id, calls, units, errors)
SELECT t.key_id,
       (t.occurred_at AT TIME ZONE 'UTC')::date,
       coalesce(substring(t.route FROM '^/[^/]*/[^/]*/[^/]*'), t.route),
       t.account_id,
       count(*),
       sum(t.cost),
       count(*) FILTER (WHERE t.upstream_status >= 500)
FROM subscription_tracking t
JOIN api_key k ON k.id = t.key_id
WHERE t.occurred_at >= date_trunc('month', (now() - interval '93 days') AT TIME ZONE 'UTC')
                        AT TIME ZONE 'UTC'
GROUP BY 1, 2, 3, 4;

INSERT INTO usage_route (account_id, month_start, route)
SELECT DISTINCT account_id, date_trunc('month', day)::date, route FROM usage_rollup;

DROP TABLE key_usage_counter;
