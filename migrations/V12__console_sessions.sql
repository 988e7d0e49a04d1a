-- V12: sessions of the operator console (SPEC §10, GET /console/).
--
-- An operator signs in with `admin.token` and gets a random session id in an
-- HttpOnly cookie; only its SHA-256 is stored here, so a copy of this table opens no
-- console. Every replica reads the same table, so a session works on any replica behind
-- the load balancer, and signing out (which deletes the row) ends it on all of them.
-- A session lasts 12 hours from sign-in; each sign-in deletes the sessions that have
-- expired, so the table holds only live sessions and the few that expired since the
-- last sign-in. To end every console session at once (say, after rotating the token):
--   DELETE FROM console_session;
CREATE TABLE console_session (
    token_hash bytea       PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    -- The one-time message of the page shown after a form was sent (post, redirect,
    -- get): set by the form's handler, cleared by the page that shows it.
    flash_kind text CHECK (flash_kind IN ('done', 'error')),
    flash      text
);

-- Sign-in deletes the expired sessions through this index.
CREATE INDEX console_session_expiry_idx ON console_session (expires_at);
