-- V6: the ledger stops checking each row's subscription against `subscription`.
--
-- The foreign key made every ledger insert take a KEY SHARE row lock on the
-- subscription it counted against, which writes that subscription's tuple and a WAL
-- record per call: measured on 1,000-row batches it doubled the insert's cost (42 ms
-- → 22 ms without it). The listener reads the account's subscriptions in the very
-- transaction that inserts the rows, under the account's row lock, so the value it
-- writes exists; `subscription_id` records which plan a call counted against and is
-- not a key anything is joined through for accounting (`used` comes from
-- `usage_counter`). Subscriptions are never deleted by the gateway; an operator who
-- deletes one by hand should clear the ledger's references to it first:
--   UPDATE subscription_tracking SET subscription_id = NULL WHERE subscription_id = <id>;
--
-- The account foreign key stays: the listener holds the account's row lock already,
-- so checking it costs next to nothing, and deleting an account still removes its rows.

ALTER TABLE subscription_tracking
    DROP CONSTRAINT subscription_tracking_subscription_id_fkey;
