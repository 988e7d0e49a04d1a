-- Seeds a migrated tollgate database for the console benchmark (bench/console/run.sh):
-- :accounts accounts, each with a key, its free subscription and this month's free grant;
-- every 10th on a paid plan of 50,000 units, every 100th on a `starter` plan of 5 units
-- (so about 1 % are exhausted); :calls ledger rows spread over the whole current UTC
-- month, skewed so the oldest accounts call most, each by the account's key on one of
-- five routes (half of them on the first, 1 % answered 500 by the upstream), with
-- `usage_counter`, `usage_daily`, the analytics rollup (`usage_rollup`, `usage_route`)
-- agreeing with them as accounting keeps them; a top-up on every 50th account.
--
-- The ledger's calls carry no latency, so the rollup's histograms are made up: per route
-- a typical latency (5 to 34 ms) holding most calls, and 30 %, 15 % and 4 % of them
-- about 1.3, 2 and 4.8 times slower, stored as accounting stores them (from bucket 0 to
-- the last non-empty one).
--
-- Rows dated later this month are on purpose: the month's counters (`usage_counter`, read
-- by the top 10 and the exhausted lists) then hold a whole month of calls whatever the
-- day the benchmark runs, as on the month's last day, the heaviest; the charts leave the
-- days after today out, and run.sh times the overview's once-a-minute sum of the days
-- before today on the whole month.
--
--   psql -v accounts=100000 -v calls=1000000 -f bench/console/seed.sql DATABASE
\set ON_ERROR_STOP on
SET synchronous_commit = off;

CREATE TEMP TABLE bench_month AS
SELECT date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS start,
       (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC' AS finish;

INSERT INTO account (email, password_hash, created_at)
SELECT format('bench-%s@example.com', g), 'not-a-password-hash', now() - interval '60 days'
FROM generate_series(1, :accounts) g;

INSERT INTO api_key (account_id, key_hash, prefix, created_at)
SELECT id, sha256(convert_to('tgk_bench_' || id, 'UTF8')), 'tgk_' || substr(md5(id::text), 1, 8), created_at
FROM account;

INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
SELECT id, 'free', created_at, 3000 FROM account;
INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
SELECT id, 'pro', created_at + interval '1 day', 50000 FROM account WHERE id % 10 = 0 AND id % 100 <> 0;
INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
SELECT id, 'starter', created_at + interval '1 day', 5 FROM account WHERE id % 100 = 0;

INSERT INTO monthly_usage (account_id, subscription_id, month_start, allowance, is_free)
SELECT s.account_id, s.id, m.start, s.monthly_allowance, s.plan = 'free'
FROM subscription s, bench_month m;

INSERT INTO credit_grant (account_id, calls, remaining, expires_at)
SELECT id, 1000, 1000, NULL FROM account WHERE id % 50 = 25;

SELECT subscription_tracking_add_month(start) FROM bench_month \g /dev/null

-- The seed makes one key per account: each call is its account's key's.
INSERT INTO subscription_tracking
    (transaction_id, account_id, key_id, occurred_at, method, route, upstream_status, cost)
SELECT gen_random_uuid(), c.account_id, k.id, c.occurred_at, 'GET',
       CASE WHEN c.pick < 0.50 THEN '/vedic/v1/horoscope/daily'
            WHEN c.pick < 0.70 THEN '/vedic/v1/kundli'
            WHEN c.pick < 0.85 THEN '/vedic/v1/panchang/today'
            WHEN c.pick < 0.95 THEN '/western/v1/synastry'
            ELSE '/western/v1/chart/natal' END,
       CASE WHEN c.fail < 0.01 THEN 500 ELSE 200 END,
       1
FROM (SELECT 1 + floor(power(random(), 2) * :accounts)::bigint AS account_id,
             m.start + random() * (m.finish - m.start - interval '1 second') AS occurred_at,
             random() AS pick, random() AS fail
      FROM generate_series(1, :calls), bench_month m) c
JOIN api_key k ON k.account_id = c.account_id;

INSERT INTO usage_counter (account_id, month_start, used)
SELECT t.account_id, m.start, sum(t.cost)
FROM subscription_tracking t, bench_month m
WHERE t.occurred_at >= m.start AND t.occurred_at < m.finish
GROUP BY t.account_id, m.start;

INSERT INTO usage_daily_closed (account_id, day_start, calls, used)
SELECT account_id, date_trunc('day', occurred_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', count(*), sum(cost)
FROM subscription_tracking
GROUP BY 1, 2;

-- The rollup as accounting writes it (route: the path's first three segments, no prefix
-- being configured), a day's rows after the day before's, so an account's days lie on
-- different pages as they do when written call by call.
INSERT INTO usage_rollup (key_id, day, route, account_id, calls, units, errors, latency)
SELECT key_id, day, route, account_id, calls, units, errors,
       (array_fill(0, ARRAY[base]) || (calls - slower - slow - slowest)::integer
        || array_fill(0, ARRAY[5]) || slower || array_fill(0, ARRAY[11]) || slow
        || array_fill(0, ARRAY[21]) || slowest)
       [1:CASE WHEN slowest > 0 THEN base + 41 WHEN slow > 0 THEN base + 19
               WHEN slower > 0 THEN base + 7 ELSE base + 1 END]
FROM (SELECT g.*,
             (calls * 30 / 100)::integer AS slower,
             (calls * 15 / 100)::integer AS slow,
             (calls * 4 / 100)::integer AS slowest,
             -- the bucket of the route's typical latency: 100 µs · 1.04^(base - 1)
             CASE route WHEN '/vedic/v1/horoscope' THEN 100 WHEN '/vedic/v1/kundli' THEN 140
                        WHEN '/vedic/v1/panchang' THEN 115 WHEN '/western/v1/synastry' THEN 150
                        ELSE 125 END AS base
      FROM (SELECT key_id,
                   (occurred_at AT TIME ZONE 'UTC')::date AS day,
                   coalesce(substring(route FROM '^/[^/]*/[^/]*/[^/]*'), route) AS route,
                   account_id,
                   count(*) AS calls,
                   sum(cost) AS units,
                   count(*) FILTER (WHERE upstream_status >= 500) AS errors
            FROM subscription_tracking
            GROUP BY 1, 2, 3, 4) g) r
ORDER BY day, key_id, route;

INSERT INTO usage_route (account_id, month_start, route)
SELECT DISTINCT account_id, date_trunc('month', day)::date, route FROM usage_rollup;

ANALYZE;
