#!/usr/bin/env python3
"""A litejobs --serve worker: one job per line on stdin, one answer per line on stdout.

    litejobs --db app.db work --serve count_words="python3 examples/serve_worker.py"
    litejobs --db app.db enqueue count_words '{"text": "hello litejobs"}'

Protocol: docs/serve-protocol.md. Logs go to stderr (litejobs logs them); stdout is only
for answers.
"""
import json
import sys


def handle(payload):
    if not isinstance(payload.get("text"), str):
        return {"outcome": "permanent", "error": "payload needs a string 'text'"}
    return {"outcome": "ok", "result": {"words": len(payload["text"].split())}}


for line in sys.stdin:  # ends when litejobs closes stdin: exit quietly
    job = json.loads(line)
    if "cancel" in job:  # a cancel for a job answered already (it crossed the answer): skip
        continue
    try:
        answer = handle(job["payload"])
    except Exception as e:  # a bug or a passing failure: the retry policy decides
        answer = {"outcome": "retry", "error": f"{type(e).__name__}: {e}"}
    answer["id"] = job["id"]
    print(json.dumps(answer), flush=True)
