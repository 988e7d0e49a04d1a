-- V20: the audit log (SPEC §19): who changed what of an account, when and from where.
--
-- Every change of an account's keys (created, changed, rolled, revoked), subscriptions
-- (activated by an operator, a redeemed code, a payment or signup; ended by a
-- cancelled payment) and top-ups writes one row here, in the same transaction as the
-- change: a change that fails or rolls back leaves no row, and a committed one always
-- has its row. Read it through `GET /admin/v1/audit`, `GET /account/v1/audit` (an
-- account's own rows), the console's account page or the portal's overview.
--
-- * `actor`: who asked — `account` (the customer, through a session or the portal),
--   `admin` (the admin token or the console), `stripe` (a payment event) or `system`
--   (the gateway by its own rules, such as the free subscription given at signup).
-- * `action`: what happened, as `key.created`, `key.changed`, `key.rolled`,
--   `key.revoked`, `subscription.activated`, `code.redeemed`, `payment.activated`,
--   `subscription.ended`, `grant.added`; `target` what it happened to (`key:42`,
--   `subscription:7`, `grant:3`).
-- * `detail`: a small object of what changed (a key's name, prefix, expiry, scopes and
--   limits; a subscription's plan and allowances; a top-up's units and expiry). It
--   never holds a secret: no API key, key hash, password, session token, redemption
--   code or Stripe secret is written here.
-- * `ip`: the client address the request came from (behind `server.trusted_proxies`,
--   the address they forwarded for), NULL when none is known or the gateway acted on
--   its own.
--
-- `account_id` has no foreign key on purpose: the rows outlive a deleted account, and
-- `ON DELETE SET NULL` would be an UPDATE, which the table refuses (below).
--
-- Rows are append-only: a trigger refuses every UPDATE and DELETE, and TRUNCATE, whoever
-- asks. The table grows by a few rows per change an operator or customer makes, not per
-- proxied call. Should old rows ever have to go (say, past a retention period), an
-- operator owning the table removes them deliberately, in one transaction:
--   BEGIN;
--   ALTER TABLE audit_event DISABLE TRIGGER audit_event_append_only;
--   DELETE FROM audit_event WHERE at < now() - interval '2 years';
--   ALTER TABLE audit_event ENABLE TRIGGER audit_event_append_only;
--   COMMIT;
-- (ALTER TABLE holds the table's lock until COMMIT, so no change is recorded meanwhile
-- and none is lost: writers wait.)

CREATE TABLE audit_event (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    account_id bigint,
    actor      text        NOT NULL
        CONSTRAINT audit_event_actor_check CHECK (actor IN ('account', 'admin', 'stripe', 'system')),
    action     text        NOT NULL,
    target     text        NOT NULL,
    detail     jsonb       NOT NULL DEFAULT '{}',
    ip         inet
);

-- An account's events, newest first, a page at a time (the account API, the console,
-- the portal, and the admin API's `?account_id=`).
CREATE INDEX audit_event_account_idx ON audit_event (account_id, id DESC);
-- The admin API's `?action=`.
CREATE INDEX audit_event_action_idx ON audit_event (action, id DESC);

CREATE FUNCTION audit_event_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_event is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'see migrations/V20__audit_log.sql for pruning old rows';
END
$$;

CREATE TRIGGER audit_event_append_only
    BEFORE UPDATE OR DELETE ON audit_event
    FOR EACH ROW EXECUTE FUNCTION audit_event_refuse_change();

CREATE TRIGGER audit_event_no_truncate
    BEFORE TRUNCATE ON audit_event
    FOR EACH STATEMENT EXECUTE FUNCTION audit_event_refuse_change();
