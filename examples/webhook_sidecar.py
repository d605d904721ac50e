#!/usr/bin/env python3
"""Webhook delivery from any language, with litejobs as a sidecar.

The application registers a webhook endpoint and records a delivery with plain SQL, in one
transaction; `litejobs work` signs and delivers it, with retries, backoff, a circuit
breaker and dead letters. Only Python's standard library and the columns documented in
schema.sql are used.

    python3 examples/webhook_sidecar.py app.db http://127.0.0.1:8000/hooks
    LITEJOBS_WEBHOOK_ALLOW_PRIVATE=1 litejobs --db app.db work

(LITEJOBS_WEBHOOK_ALLOW_PRIVATE=1 lets the SSRF guard deliver to 127.0.0.1; leave it out
for public endpoints.) A new database file gets its tables from schema.sql, exactly as
litejobs' own migrations would make them.

Prints one JSON line: the endpoint id, its secret (give it to the receiver), the event id
and the delivery job's id.
"""

import base64
import json
import os
import secrets
import sqlite3
import sys
import uuid

SCHEMA_SQL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schema.sql")


def open_database(path):
    # timeout: wait for litejobs' write lock like any well-behaved writer would.
    conn = sqlite3.connect(path, timeout=10)
    has_jobs = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"
    ).fetchone()
    if not has_jobs:
        with open(SCHEMA_SQL, encoding="utf-8") as schema:
            conn.executescript(schema.read())
    return conn


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: webhook_sidecar.py DATABASE RECEIVER_URL")
    database, url = sys.argv[1], sys.argv[2]
    # Standard Webhooks secret: whsec_ + base64 of 24 to 64 random bytes.
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")
    event_id = "evt_" + uuid.uuid4().hex

    conn = open_database(database)
    with conn:  # one transaction: the endpoint and its delivery commit together
        endpoint_id = conn.execute(
            "INSERT INTO webhook_endpoints (url, secret, description) VALUES (?, ?, ?)",
            (url, secret, "python sidecar example"),
        ).lastrowid
        payload = {
            "endpoint_id": endpoint_id,
            "event_type": "order.paid",
            "event_id": event_id,
            "body": {"type": "order.paid", "data": {"order_id": 42, "total": "19.90"}},
        }
        job_id = conn.execute(
            "INSERT INTO jobs (job_type, payload, idempotency_key, group_key) "
            "VALUES ('deliver_webhook', ?, ?, ?)",
            (
                json.dumps(payload),
                # Dedupe by event, and deliver one endpoint's events in order.
                "webhook:%d:%s" % (endpoint_id, event_id),
                "endpoint:%d" % endpoint_id,
            ),
        ).lastrowid
    conn.close()
    print(
        json.dumps(
            {
                "endpoint_id": endpoint_id,
                "secret": secret,
                "event_id": event_id,
                "job_id": job_id,
            }
        )
    )


if __name__ == "__main__":
    main()
