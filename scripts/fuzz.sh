#!/usr/bin/env bash
# Runs the property-driven fuzz targets (tests/fuzz.rs) and the model-based test
# (tests/model.rs) for a set time, outside CI: round after round with fresh random seeds and
# many cases. CI runs them with a few hundred cases plus tests/fuzz_corpus.txt and the saved
# failures in proptest-regressions/.
#
# Usage: scripts/fuzz.sh [SECONDS] [CASES_PER_ROUND]        (default: 600 s, 20000 cases)
#
# The fuzz targets get CASES_PER_ROUND cases each; the model test (a whole random job history
# per case) and the command line (a process per case) get a twentieth. A failure stops the
# run; proptest prints the shrunk input and appends its seed to proptest-regressions/<target>.txt.
# Commit that file, and add the input to tests/fuzz_corpus.txt, so that CI replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-600}"
cases="${2:-20000}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# The debug profile on purpose: its overflow checks turn arithmetic bugs into failures.
cargo test --test integration --no-run
end=$(( $(date +%s) + seconds ))
round=0

# Runs one `cargo test` filter with a case count, bounded by the time left. Returns 0 when it
# passed or ran out of time without a failure.
run() {
    local filter="$1" n="$2" left status=0
    left=$(( end - $(date +%s) ))
    if [ "$left" -le 0 ]; then
        return 0
    fi
    PROPTEST_CASES="$n" timeout --foreground "$left" \
        cargo test -q --test integration -- "$filter" 2>&1 | tee "$log" || status=$?
    if grep -Eq "Test failed|panicked at|FAILED" "$log"; then
        echo "fuzz: round $round FAILED in $filter (see above; the seed is in proptest-regressions/)" >&2
        exit 1
    fi
    if [ "$status" -ne 0 ] && [ "$status" -ne 124 ]; then
        exit "$status"
    fi
}

while [ "$(date +%s)" -lt "$end" ]; do
    round=$(( round + 1 ))
    echo "fuzz: round $round, $cases cases per target, $(( end - $(date +%s) ))s left"
    run fuzz:: "$cases"
    run model:: "$(( cases / 20 > 50 ? cases / 20 : 50 ))"
done
echo "fuzz: $round rounds in ${seconds}s, no failure"
