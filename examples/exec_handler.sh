#!/bin/sh
# A litejobs --exec handler: one process per job, the payload as JSON on stdin.
#
#   litejobs --db app.db work --exec resize=examples/exec_handler.sh --timeout resize=2m
#   litejobs --db app.db enqueue resize '{"path": "photo.jpg", "width": 640}'
#
# The exit code is the outcome: 0 succeeded (stdout, when JSON, is the result), 65 dead at
# once, 75 retry after the delay printed on stdout, 98 cancelled, 99 snooze, anything else
# retry by the retry policy. stderr's end is the attempt's error.
payload=$(cat)
path=$(printf '%s' "$payload" | sed -n 's/.*"path" *: *"\([^"]*\)".*/\1/p')
if [ -z "$path" ]; then
    echo "job $LITEJOBS_JOB_ID: the payload has no \"path\"" >&2
    exit 65 # EX_DATAERR: retrying cannot help
fi
if [ ! -e "$path" ]; then
    echo "job $LITEJOBS_JOB_ID: $path is not there yet (attempt $LITEJOBS_ATTEMPT of $LITEJOBS_MAX_ATTEMPTS)" >&2
    echo 30 # seconds until the next attempt
    exit 75 # EX_TEMPFAIL
fi
bytes=$(wc -c < "$path")
printf '{"path": "%s", "bytes": %s}\n' "$path" "$bytes"
