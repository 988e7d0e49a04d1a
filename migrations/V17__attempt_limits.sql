-- V17: abuse limits kept where every replica sees them.
--
-- Signups per client address, failed logins, failed redemptions and failed admin-token
-- authentications used to be counted in each replica's memory, so a fleet of N replicas
-- allowed N times each documented limit. Each limit is now one row here per subject (a
-- client address, an (email, address) pair, an account), read and bumped in the same
-- statement by every replica.
--
-- A row is a GCRA cell ("generic cell rate algorithm", the rule behind token buckets):
-- `tat` is the instant at which the subject's bucket would be empty again. A limit of `n`
-- an hour has an interval of `3600 / n` seconds and a burst of `n`; one more attempt fits
-- while `tat <= now + (n - 1) * interval`, and each counted attempt moves `tat` one
-- interval on. A row whose `tat` is past holds nothing and is deleted by any replica's
-- minutely housekeeping, so the table holds only subjects seen within the last hour.
--
-- Subjects are never stored in clear where they are personal: an email is kept as a
-- SHA-256 digest. The table is new; nothing existing changes, and replicas of the
-- previous version keep counting in memory until they are replaced.
CREATE TABLE attempt_limit (
    key text PRIMARY KEY,
    tat timestamptz NOT NULL
);

CREATE INDEX attempt_limit_tat ON attempt_limit (tat);
