-- V11: threshold webhooks (SPEC §7): the outbox of events to deliver, and the lease of
-- the one process that delivers them.
--
-- When `notify.webhook_url` and `notify.webhook_secret` are set, the transaction that
-- accounts a batch of calls also writes one row here for every `notify.thresholds`
-- percentage of the month's allowance an account's `used` crossed in that batch. The
-- process holding `notification_lease` POSTs the pending rows to the webhook, oldest
-- first per account, and records each attempt here. Nothing else reads these tables:
-- accounting never waits on the receiver.

-- One row per account, month and threshold, whoever accounted the crossing (replicas,
-- workers, redelivered events): the unique constraint is what makes it one event per
-- threshold and month. The row's `id` is the event's `id`, the same on every attempt.
--
--   used, allowance   the account's `used` right after the call that crossed the
--                     threshold, and the month's allowance (credits excluded) then;
--   occurred_at       that call's time;
--   recorded_at       when the accounting transaction wrote the row; attempts stop 24
--                     hours after it;
--   attempts          POSTs made so far; `next_attempt_at` when the next is due;
--   delivered_at      the receiver answered 2xx;
--   failed_at         given up after 24 hours of failures (`last_error` says the last).
--
-- A row with neither `delivered_at` nor `failed_at` is pending. To see what waits:
--   SELECT account_id, threshold, attempts, next_attempt_at, last_error
--   FROM notification_outbox WHERE delivered_at IS NULL AND failed_at IS NULL
--   ORDER BY recorded_at;
-- To send a given-up event again (the same id), clear its failure:
--   UPDATE notification_outbox SET failed_at = NULL, recorded_at = now(),
--          next_attempt_at = now() WHERE id = '<event id>';
-- The delivering process deletes delivered and given-up rows of months that ended
-- more than a month ago; the current and previous months' rows stay, so a crossing
-- accounted late is still recognised as already sent.
CREATE TABLE notification_outbox (
    id              uuid        PRIMARY KEY,
    account_id      bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    month_start     timestamptz NOT NULL,
    threshold       smallint    NOT NULL CHECK (threshold BETWEEN 1 AND 100),
    used            bigint      NOT NULL,
    allowance       bigint      NOT NULL,
    occurred_at     timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    failed_at       timestamptz,
    last_error      text,
    UNIQUE (account_id, month_start, threshold)
);

-- The pending rows in delivery order: each account's oldest first.
CREATE INDEX notification_outbox_pending_idx
    ON notification_outbox (account_id, occurred_at, threshold)
    WHERE delivered_at IS NULL AND failed_at IS NULL;

-- The delivery lease: a single row. The process named by `holder` delivers while
-- `expires_at` is in the future, and renews it every `notify.poll_interval_ms`; a
-- stopped process gives it up at once, a dead one lets it expire
-- (`notify.lease_ttl_ms`) and the next process to look takes over. Every `serve` that
-- accounts usage and every `tollgate worker` competes for it.
CREATE TABLE notification_lease (
    id         boolean     PRIMARY KEY DEFAULT true CHECK (id),
    holder     uuid        NOT NULL,
    expires_at timestamptz NOT NULL
);
