#!/usr/bin/env bash
# Fails when the repository cites what a reader of it cannot look up: requirement ids (R12,
# "(R28)"), issue numbers ("issue 12", "Issue 12, section 4", `issue_12_` in a test name), a
# spec kept elsewhere ("SPEC"), work sessions ("this session", "the session's"), or paths
# outside the repository (../shared, /work/).
#
#   scripts/check-no-outside-refs.sh            # every place below
#   scripts/check-no-outside-refs.sh src docs   # only these
#
# Prints each hit as FILE:LINE:TEXT. Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

patterns=(
    '\bR[0-9]{1,2}\b'                                                        # requirement ids
    '\b[Ii]ssue[ _#]?[0-9]+'                                                 # issue numbers
    '\bSPEC\b'                                                               # a spec kept elsewhere
    "\b([Tt]his|[Tt]hat|[Aa] later|[Aa]n earlier|[Tt]he previous|[Tt]he last) session\b|\b[Tt]he session's"
    '\.\./shared\b|/work/'                                                   # paths outside
)

if [ "$#" -gt 0 ]; then
    places=("$@")
else
    places=(README.md CHANGELOG.md Cargo.toml schema.sql schema.pg.sql docs src examples tests scripts .ci)
fi

found=0
for pattern in "${patterns[@]}"; do
    # -I skips binary files (docs/dashboard.png); this script names the patterns, so it is left out.
    if grep -rnIE --exclude=check-no-outside-refs.sh -- "$pattern" "${places[@]}"; then
        found=1
    fi
done

if [ "$found" -ne 0 ]; then
    echo "check-no-outside-refs: the lines above cite requirement ids, issue numbers, a spec, work sessions or paths outside the repository; say what is meant instead" >&2
    exit 1
fi
echo "check-no-outside-refs: clean (${places[*]})"
