-- V5: tell every gateway replica at once when an API key stops being valid.
--
-- Replicas may cache key lookups (`key_cache.enabled`). Each one LISTENs on channel
-- `tollgate_api_key`; this trigger notifies the SHA-256 of a key (hex) whenever the
-- key is revoked (revoked_at set or changed) or deleted, whether through the account
-- API, by hand, or by an account deletion cascading to its keys. The notification is
-- sent when the transaction commits. To revoke by hand:
--   UPDATE api_key SET revoked_at = now() WHERE id = <key id>;

CREATE FUNCTION api_key_notify_revocation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tollgate_api_key', encode(OLD.key_hash, 'hex'));
    RETURN NULL;
END;
$$;

CREATE TRIGGER api_key_revoked
    AFTER UPDATE OF revoked_at, key_hash ON api_key
    FOR EACH ROW
    WHEN (NEW.revoked_at IS DISTINCT FROM OLD.revoked_at OR NEW.key_hash IS DISTINCT FROM OLD.key_hash)
    EXECUTE FUNCTION api_key_notify_revocation();

CREATE TRIGGER api_key_deleted
    AFTER DELETE ON api_key
    FOR EACH ROW
    EXECUTE FUNCTION api_key_notify_revocation();
