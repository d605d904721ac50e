#!/usr/bin/env bash
# The SQL fences cargo-mutants cannot mutate (they are SQL text): makes each clause always true, one
# at a time, in a scratch copy of the file under src/storage/sqlite/jobs/ that holds it, runs the
# tests that should notice,
# and prints which tests failed. Every line must name at least one failing test; a line
# saying "NOT CAUGHT" is a fence no test holds. Not run by CI (a few minutes).
#
# Usage: scripts/fences.sh [TEST FILTER...]   (default: the storage unit tests and the
#                                              runtime integration tests)
#        FENCE_CASES=REGEX scripts/fences.sh  (only the cases whose name matches)
set -euo pipefail
cd "$(dirname "$0")/.."

filters=("$@")
if [ ${#filters[@]} -eq 0 ]; then
    filters=(storage::sqlite::jobs outcomes:: timeouts:: shutdown:: ordering:: foreign_rows
        a_paused_queue)
fi
scratch=target/fences/src
rm -rf target/fences/src && mkdir -p target/fences
# A scratch copy of the crate (sources, tests, manifests): the working tree is never touched.
git ls-files -z | tar --null -T - -cf - | (mkdir -p "$scratch" && tar -xf - -C "$scratch")
export CARGO_TARGET_DIR="$PWD/target/fences/target"

# name | its file in src/storage/sqlite/jobs/ | the clause (exactly as there) | which occurrence
# in that file (1-based) |
# the same clause made always true. Every parameter stays in the SQL, so a mutant fails
# only by what it lets through, never by a parameter-count error.
cases=(
    "heartbeat: status|complete.rs|AND status = 'running' AND locked_by = ?5 AND attempts = ?6|1|AND (status = 'running' OR 1) AND locked_by = ?5 AND attempts = ?6"
    "heartbeat: locked_by|complete.rs|AND status = 'running' AND locked_by = ?5 AND attempts = ?6|1|AND status = 'running' AND (locked_by = ?5 OR 1) AND attempts = ?6"
    "heartbeat: attempts|complete.rs|AND status = 'running' AND locked_by = ?5 AND attempts = ?6|1|AND status = 'running' AND locked_by = ?5 AND (attempts = ?6 OR 1)"
    "complete: status|complete.rs|AND jobs.status = 'running'|1|AND (jobs.status = 'running' OR 1)"
    "complete: locked_by|complete.rs|AND jobs.locked_by = done.column3|1|AND (jobs.locked_by = done.column3 OR 1)"
    "complete: attempts|complete.rs|AND jobs.attempts = done.column2|1|AND (jobs.attempts = done.column2 OR 1)"
    "fail/retry/dead: status|complete.rs|AND status = 'running' AND locked_by = ?6 AND attempts = ?7|1|AND (status = 'running' OR 1) AND locked_by = ?6 AND attempts = ?7"
    "fail/retry/dead: locked_by|complete.rs|AND status = 'running' AND locked_by = ?6 AND attempts = ?7|1|AND status = 'running' AND (locked_by = ?6 OR 1) AND attempts = ?7"
    "fail/retry/dead: attempts|complete.rs|AND status = 'running' AND locked_by = ?6 AND attempts = ?7|1|AND status = 'running' AND locked_by = ?6 AND (attempts = ?7 OR 1)"
    "snooze/release: status|complete.rs|AND status = 'running' AND locked_by = ?4 AND attempts = ?5|1|AND (status = 'running' OR 1) AND locked_by = ?4 AND attempts = ?5"
    "snooze/release: locked_by|complete.rs|AND status = 'running' AND locked_by = ?4 AND attempts = ?5|1|AND status = 'running' AND (locked_by = ?4 OR 1) AND attempts = ?5"
    "snooze/release: attempts|complete.rs|AND status = 'running' AND locked_by = ?4 AND attempts = ?5|1|AND status = 'running' AND locked_by = ?4 AND (attempts = ?5 OR 1)"
    "cancel: status|complete.rs|AND status = 'running' AND locked_by = ?4 AND attempts = ?5|2|AND (status = 'running' OR 1) AND locked_by = ?4 AND attempts = ?5"
    "cancel: locked_by|complete.rs|AND status = 'running' AND locked_by = ?4 AND attempts = ?5|2|AND status = 'running' AND (locked_by = ?4 OR 1) AND attempts = ?5"
    "cancel: attempts|complete.rs|AND status = 'running' AND locked_by = ?4 AND attempts = ?5|2|AND status = 'running' AND locked_by = ?4 AND (attempts = ?5 OR 1)"
    "reap (attempt rows): live lease|reap.rs|AND (locked_until < ?1 OR locked_until IS NULL)\",|1|AND (locked_until < ?1 OR locked_until IS NULL OR 1)\","
    "reap (lost attempt counts): live lease|reap.rs|AND (locked_until < ?1 OR locked_until IS NULL)\n|1|AND (locked_until < ?1 OR locked_until IS NULL OR 1)\n"
    "reap (dead job counts): live lease|reap.rs|AND (locked_until < ?1 OR locked_until IS NULL)\n|2|AND (locked_until < ?1 OR locked_until IS NULL OR 1)\n"
    "reap (dead): live lease|reap.rs|AND (locked_until < ?1 OR locked_until IS NULL)\n|3|AND (locked_until < ?1 OR locked_until IS NULL OR 1)\n"
    "reap (due again): live lease|reap.rs|AND (locked_until < ?1 OR locked_until IS NULL)\",|2|AND (locked_until < ?1 OR locked_until IS NULL OR 1)\","
    "claim: one running job per group key|claim.rs|NOT EXISTS (SELECT 1 FROM jobs r|1|1 + 0 * EXISTS (SELECT 1 FROM jobs r"
    "claim: first due job of a group key|claim.rs|AND j.id = (SELECT g.id|1|AND j.id = j.id + 0 * (SELECT g.id"
    "claim: due only|claim.rs|AND j.run_at <= ?2|1|AND (j.run_at <= ?2 OR 1)"
    "claim: paused queue|claim.rs|AND NOT EXISTS (SELECT 1 FROM queues WHERE name = ?5 AND paused = 1)|1|AND (NOT EXISTS (SELECT 1 FROM queues WHERE name = ?5 AND paused = 1) OR 1)"
)

for case in "${cases[@]}"; do
    IFS='|' read -r name file old nth new <<<"$case"
    # FENCE_CASES (a regular expression) runs only the cases whose name matches.
    if [ -n "${FENCE_CASES:-}" ] && ! grep -qE -- "$FENCE_CASES" <<<"$name"; then
        continue
    fi
    rel="src/storage/sqlite/jobs/$file"
    # Every file back as it is, so only this case's clause differs.
    cp src/storage/sqlite/jobs/*.rs "$scratch/src/storage/sqlite/jobs/"
    python3 - "$scratch/$rel" "$old" "$nth" "$new" <<'EOF'
import sys
path, old, nth, new = sys.argv[1], sys.argv[2].replace("\\n", "\n"), int(sys.argv[3]), sys.argv[4].replace("\\n", "\n")
text = open(path).read()
at = -1
for _ in range(nth):
    at = text.find(old, at + 1)
    if at < 0:
        sys.exit(f"clause not found: {old!r} (occurrence {nth})")
open(path, "w").write(text[:at] + new + text[at + len(old):])
EOF
    log="$PWD/target/fences/$(echo "$name" | tr -c 'a-z0-9' '_').log"
    (cd "$scratch" && timeout 900 cargo test --quiet --lib --test integration -- "${filters[@]}" \
        >"$log" 2>&1) || true
    failed=$(grep -E '^    [a-z_:]+$' "$log" | sed 's/^ *//' | sort -u | head -4 | paste -sd ' ' - || true)
    if [ -n "$failed" ]; then
        printf '%-44s caught by %s\n' "$name" "$failed"
    elif grep -q 'error\[' "$log"; then
        printf '%-44s BUILD FAILED (see %s)\n' "$name" "$log"
    else
        printf '%-44s NOT CAUGHT\n' "$name"
    fi
done
