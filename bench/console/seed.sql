-- Seeds a migrated tollgate database for the console benchmark (bench/console/run.sh):
-- :accounts accounts, each with a key, its free subscription and this month's free grant;
-- every 10th on a paid plan of 50,000 units, every 100th on a `starter` plan of 5 units
-- (so about 1 % are exhausted); :calls ledger rows spread over the whole current UTC
-- month, skewed so the oldest accounts call most, with `usage_counter` and `usage_daily`
-- agreeing with them as accounting keeps them; a top-up on every 50th account.
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

INSERT INTO subscription_tracking
    (transaction_id, account_id, key_id, occurred_at, method, route, upstream_status, cost)
SELECT gen_random_uuid(),
       1 + floor(power(random(), 2) * :accounts)::bigint,
       NULL,
       m.start + random() * (m.finish - m.start - interval '1 second'),
       'GET', '/vedic/v1/horoscope/daily', 200, 1
FROM generate_series(1, :calls), bench_month m;

INSERT INTO usage_counter (account_id, month_start, used)
SELECT t.account_id, m.start, sum(t.cost)
FROM subscription_tracking t, bench_month m
WHERE t.occurred_at >= m.start AND t.occurred_at < m.finish
GROUP BY t.account_id, m.start;

INSERT INTO usage_daily_closed (account_id, day_start, calls, used)
SELECT account_id, date_trunc('day', occurred_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', count(*), sum(cost)
FROM subscription_tracking
GROUP BY 1, 2;

ANALYZE;
