-- V2: subscriptions and the usage ledger.
--
-- A subscription is valid over [starts_at, expires_at); expires_at NULL means
-- open-ended. Every account has exactly one subscription with plan 'free' (its
-- free grant, the fallback when no paid subscription is active); operators add
-- paid ones. The active subscription at an instant is the latest-starting active
-- non-free one (ties: the newest id), else the free one.

CREATE TABLE subscription (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    plan       text        NOT NULL,
    starts_at  timestamptz NOT NULL,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT subscription_interval_check CHECK (expires_at IS NULL OR expires_at > starts_at)
);

CREATE INDEX subscription_account_idx ON subscription (account_id);
-- At most one free subscription per account.
CREATE UNIQUE INDEX subscription_one_free_per_account ON subscription (account_id) WHERE plan = 'free';

-- The ledger: one row per accounted call. transaction_id is the gateway's
-- request UUID, so a usage event delivered twice is recorded once.
CREATE TABLE subscription_tracking (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    transaction_id  uuid        NOT NULL,
    account_id      bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    subscription_id bigint      REFERENCES subscription (id) ON DELETE SET NULL,
    key_id          bigint,
    occurred_at     timestamptz NOT NULL,
    method          text        NOT NULL,
    route           text        NOT NULL,
    upstream_status smallint    NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT subscription_tracking_transaction_key UNIQUE (transaction_id)
);

-- History queries: an account's calls in a time range.
CREATE INDEX subscription_tracking_account_time_idx ON subscription_tracking (account_id, occurred_at);
