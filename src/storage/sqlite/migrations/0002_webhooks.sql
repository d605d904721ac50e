-- Migration 2: webhook endpoints, rate limits and circuit breakers. Frozen once
-- released; schema.sql holds the same statements.

-- Webhook endpoints: where deliveries go and the secret they are signed with. Secrets
-- live here, never in job payloads or dead-letter rows; a delivery job names its endpoint by id.
CREATE TABLE webhook_endpoints (
    -- Row id, never reused (AUTOINCREMENT): delivery payloads refer to it as endpoint_id.
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The target, an http:// or https:// URL. Required.
    url TEXT NOT NULL,
    -- Signing secret, Standard Webhooks form: 'whsec_' + base64 of 24 to 64 random bytes. Required.
    secret TEXT NOT NULL,
    -- While a secret rotates: the old one, also signed with until previous_secret_expires_at (ms).
    previous_secret TEXT,
    previous_secret_expires_at INTEGER,
    -- 1 delivers; 0 makes its deliveries dead at once (e.g. after a 410 Gone), with the reason.
    enabled INTEGER NOT NULL DEFAULT 1,
    disabled_reason TEXT,
    -- At most rate_limit requests per rate_period_ms, spaced evenly; NULL means no limit.
    rate_limit INTEGER,
    rate_period_ms INTEGER NOT NULL DEFAULT 1000,
    -- Free text for people, e.g. 'CRM production'.
    description TEXT NOT NULL DEFAULT '',
    -- When the row was inserted and last changed (ms).
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    CONSTRAINT webhook_endpoints_enabled_valid CHECK (enabled = 0 OR enabled = 1),
    CONSTRAINT webhook_endpoints_rate_valid CHECK ((rate_limit IS NULL OR rate_limit > 0) AND rate_period_ms > 0)
);

-- Rate limits by key, shared by every process on the file. One row per key, e.g.
-- 'webhook-endpoint:3'; the limit itself (n per period) is given by the caller at each check.
CREATE TABLE rate_limits (
    key TEXT PRIMARY KEY NOT NULL,
    -- When the next request may go without waiting (ms); each admitted request moves it on
    -- by period / n (the generic cell rate algorithm).
    next_at INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
) WITHOUT ROWID;

-- Circuit breakers by key, shared by every process on the file. No row means closed.
CREATE TABLE circuit_breakers (
    key TEXT PRIMARY KEY NOT NULL,
    -- closed (calls go), open (calls wait until open_until), half_open (one probe call is
    -- out until open_until; its success closes the breaker, its failure opens it again).
    state TEXT NOT NULL DEFAULT 'closed',
    -- Failures in a row; a success resets it.
    failures INTEGER NOT NULL DEFAULT 0,
    -- open: when the cool-down ends (ms); half_open: when the probe's turn lapses (ms).
    open_until INTEGER,
    -- When it last opened (ms), and the latest failure's message.
    opened_at INTEGER,
    last_error TEXT,
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    CONSTRAINT circuit_breakers_state_valid CHECK (state = 'closed' OR state = 'open' OR state = 'half_open')
) WITHOUT ROWID;
