-- V9: Stripe payment webhooks (SPEC §11): which customer pays for which account, the
-- events processed, invoices waiting for their customer, and the customer behind each
-- subscription a payment created.
--
-- Nothing existing changes meaning: every existing subscription has no Stripe customer,
-- and the relaxed interval check admits only what the old one refused as empty.

-- Subscriptions created by a Stripe customer's payment events carry that customer
-- (`cus_…`), so the customer's cancellation ends exactly those. NULL for every other
-- subscription (operators', codes', the free grant).
ALTER TABLE subscription ADD COLUMN stripe_customer text;
CREATE INDEX subscription_stripe_customer_idx ON subscription (stripe_customer)
    WHERE stripe_customer IS NOT NULL;

-- A cancellation can reach a paid period that had not begun yet; it then ends at its
-- own start: the empty interval [starts_at, starts_at) is never active. The check
-- still refuses intervals that end before they start.
ALTER TABLE subscription DROP CONSTRAINT subscription_interval_check;
ALTER TABLE subscription ADD CONSTRAINT subscription_interval_check
    CHECK (expires_at IS NULL OR expires_at >= starts_at);

-- Which account a Stripe customer pays for, learnt from the checkout session that
-- named both (`client_reference_id` = account id). The first checkout of a customer
-- decides; later invoices and cancellations of that customer go to this account.
CREATE TABLE stripe_customer (
    customer   text        PRIMARY KEY,
    account_id bigint      NOT NULL REFERENCES account (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX stripe_customer_account_idx ON stripe_customer (account_id);

-- Every Stripe event processed, by its id (`evt_…`): the row is written in the same
-- transaction as what the event did, so a redelivered event finds it and changes
-- nothing. `outcome` says what happened (activated, pending, ended, ignored,
-- unknown_account, unknown_customer, unknown_plan, malformed). Rows can be pruned after
-- Stripe's retry window (3 days) if the table grows; nothing else reads old rows.
CREATE TABLE stripe_event (
    id          text        PRIMARY KEY,
    type        text        NOT NULL,
    outcome     text        NOT NULL,
    customer    text,
    account_id  bigint      REFERENCES account (id) ON DELETE SET NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- Paid invoices of customers not known yet (Stripe does not order its events: an
-- `invoice.paid` may arrive before the `checkout.session.completed` that maps its
-- customer). The checkout that maps the customer applies them in its own
-- transaction and sets `applied_at`; a cancellation arriving first shortens them.
CREATE TABLE stripe_pending_invoice (
    event_id     text        PRIMARY KEY REFERENCES stripe_event (id) ON DELETE CASCADE,
    customer     text        NOT NULL,
    price_id     text        NOT NULL,
    period_start timestamptz NOT NULL,
    period_end   timestamptz NOT NULL,
    applied_at   timestamptz
);

CREATE INDEX stripe_pending_invoice_customer_idx ON stripe_pending_invoice (customer)
    WHERE applied_at IS NULL;
