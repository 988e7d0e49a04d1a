-- Accounts as signup leaves them, for the benchmarks (bench/run.sh, bench/callgrind.sh):
-- :accounts accounts, each with one API key, its free subscription and this month's free
-- grant of :free_calls calls. The keys, one a line in account order, go to the file
-- :keys. Run with psql -v accounts=N -v free_calls=N -v keys=PATH -f.
\set month 'date_trunc(''month'', now() AT TIME ZONE ''UTC'') AT TIME ZONE ''UTC'''
BEGIN;
CREATE TEMP TABLE bench_key ON COMMIT DROP AS
SELECT n, 'tgk_' || substr(md5(random()::text || n) || md5(n || random()::text), 1, 40) AS key
FROM generate_series(1, :accounts) AS n;
INSERT INTO account (email, password_hash)
SELECT 'bench-' || n || '@example.com', 'bench-account-no-login' FROM bench_key ORDER BY n;
INSERT INTO api_key (account_id, key_hash, prefix)
SELECT a.id, sha256(convert_to(k.key, 'UTF8')), substr(k.key, 1, 12)
FROM bench_key k JOIN account a ON a.email = 'bench-' || k.n || '@example.com';
INSERT INTO subscription (account_id, plan, starts_at, monthly_allowance)
SELECT id, 'free', :month, :free_calls FROM account;
INSERT INTO monthly_usage (account_id, subscription_id, month_start, allowance, is_free)
SELECT account_id, id, :month, :free_calls, true FROM subscription;
\pset format unaligned
\pset tuples_only on
SELECT key FROM bench_key ORDER BY n \g :keys
COMMIT;
