-- V21: windows of totals per minute and spend caps in money (SPEC §20).
--
-- What this adds to `subscription`:
-- * `minute_allowance`: units per fixed 60 s window aligned to the epoch minute (UTC);
--   NULL = no minute window.
-- * `unit_price_micros`: what one unit costs, in micro-USD (an integer: no floating
--   point anywhere in money); NULL = the plan has no price.
-- * `spend_cap_day_micros`, `spend_cap_month_micros`: the most a UTC day and a UTC month
--   may cost; NULL = no cap. A cap needs a price.
-- A catalogue plan's figures are copied in when the subscription is activated, as its
-- features and rate limit are, so a reload that changes the catalogue does not move
-- subscriptions already active. Existing subscriptions get none of them.
--
-- Nullable columns without defaults: added without rewriting the table, and without a
-- lock longer than the catalogue change itself.

ALTER TABLE subscription
    ADD COLUMN minute_allowance bigint
        CONSTRAINT subscription_minute_allowance_check CHECK (minute_allowance >= 0),
    ADD COLUMN unit_price_micros bigint
        CONSTRAINT subscription_unit_price_check CHECK (unit_price_micros >= 0),
    ADD COLUMN spend_cap_day_micros bigint
        CONSTRAINT subscription_spend_cap_day_check CHECK (spend_cap_day_micros >= 0),
    ADD COLUMN spend_cap_month_micros bigint
        CONSTRAINT subscription_spend_cap_month_check CHECK (spend_cap_month_micros >= 0),
    ADD CONSTRAINT subscription_spend_cap_price_check CHECK (
        unit_price_micros IS NOT NULL
        OR (spend_cap_day_micros IS NULL AND spend_cap_month_micros IS NULL));
