-- Idempotent retries: the first successful response to a request carrying an Idempotency-Key,
-- kept per tenant, user and key until expires_at. A record is written in the same transaction as
-- the request's effect, so the two are committed (or lost) together.
CREATE TABLE idempotency_keys (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    key text NOT NULL,
    -- sha256 over the method, the path with its query and the body of the first request.
    request_hash bytea NOT NULL,
    method text NOT NULL,
    path text NOT NULL,
    -- The stored response: status, the headers the handler set ([[name, value], ...]) and body.
    status smallint NOT NULL,
    headers jsonb NOT NULL DEFAULT '[]',
    body bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (tenant_id, user_id, key),
    CONSTRAINT idempotency_keys_key_check CHECK (length(key) BETWEEN 1 AND 255),
    CONSTRAINT idempotency_keys_status_check CHECK (status BETWEEN 200 AND 299)
);
SELECT mnemo_scope_table('idempotency_keys');

-- The expiry sweep deletes the oldest expired records first, across tenants.
CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);

-- The sweep is a background job over every tenant. It runs as mnemo_app with the
-- transaction-local setting mnemo.sweeper = 'on' (as the task lifecycle sweeper does), which these
-- policies honour for expired records only, and only to read and delete them. Request
-- transactions never set mnemo.sweeper.
CREATE POLICY idempotency_sweep_read ON idempotency_keys FOR SELECT
    USING (current_setting('mnemo.sweeper', true) = 'on' AND expires_at <= now());
CREATE POLICY idempotency_sweep_delete ON idempotency_keys FOR DELETE
    USING (current_setting('mnemo.sweeper', true) = 'on' AND expires_at <= now());
