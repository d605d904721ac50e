#!/usr/bin/env bash
# The soak test (tests/soak.rs), not run by CI: a million jobs worked by several worker
# processes that are killed with SIGKILL at random moments (every 0.2-2 s) and restarted,
# until every job is done or the minutes are up. Prints jobs/s, the maximum lease overrun,
# and lost / duplicated counts; fails if anything was lost or ran twice under a live lease.
#
# Usage: scripts/soak.sh [MINUTES] [JOBS] [WORKERS]        (default: 10, 1000000, 2)
# Environment: PROFILE=debug skips the release build; SOAK_JOB_US adds busy time per job;
# LITEJOBS_TEST_SEED replays a kill schedule.
set -euo pipefail
cd "$(dirname "$0")/.."

export SOAK_MINUTES="${1:-10}"
export SOAK_JOBS="${2:-1000000}"
export SOAK_WORKERS="${3:-2}"
profile=(--release)
if [ "${PROFILE:-release}" = "debug" ]; then
    profile=()
fi
cargo test "${profile[@]}" --test integration soak:: -- --ignored --nocapture --test-threads=1
