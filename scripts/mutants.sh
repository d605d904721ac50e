#!/usr/bin/env bash
# Mutation testing of the core files with cargo-mutants (not run by CI: it takes about an
# hour and a half on 2 cores). Each core file is mutated with the tests that cover it, so every mutant
# builds and runs only those; a mutant no test catches is a change in behaviour nobody
# would notice. Prints one line per file (caught / missed / timeouts / unviable, kill rate)
# and lists every missed mutant; the whole output of each file stays under
# target/mutants/<file>/ (mutants.out/outcomes.json, caught.txt, missed.txt, ...).
#
# Usage: scripts/mutants.sh [FILE...]        (default: every core file below)
# Needs: cargo install cargo-mutants (version 27) and cargo-nextest.
# Environment: MUTANTS_JOBS (default 1) builds that many mutants at once; MUTANTS_RE (a
# regular expression) tests only the mutants whose name matches (e.g. after changing one
# function).
#
# Mutants judged equivalent (no behaviour a user relies on changes) are excluded with
# --exclude-re below, each with its reason; docs/development.md says what they have in common.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-mutants >/dev/null || {
    echo "cargo-mutants is not installed: cargo install cargo-mutants" >&2
    exit 2
}

# file -> the tests that cover it: test-name filters given to both the library's unit tests
# and the integration binary (a test runs when its path contains any of them).
declare -A TESTS=(
    [src/job/retry.rs]="retry"
    [src/limits/rate.rs]="limits"
    [src/limits/breaker.rs]="limits"
    [src/storage/sqlite/jobs/insert.rs]="storage::sqlite::jobs foreign_rows outcomes:: ordering:: shutdown:: drain:: timeouts:: enqueue:: dead_discard"
    [src/storage/sqlite/jobs/claim.rs]="storage::sqlite::jobs foreign_rows outcomes:: ordering:: shutdown:: drain:: timeouts:: enqueue:: dead_discard"
    [src/storage/sqlite/jobs/row_rules.rs]="storage::sqlite::jobs foreign_rows outcomes:: ordering:: shutdown:: drain:: timeouts:: enqueue:: dead_discard"
    [src/storage/sqlite/jobs/complete.rs]="storage::sqlite::jobs foreign_rows outcomes:: ordering:: shutdown:: drain:: timeouts:: enqueue:: dead_discard"
    [src/storage/sqlite/jobs/reap.rs]="storage::sqlite::jobs foreign_rows outcomes:: ordering:: shutdown:: drain:: timeouts:: enqueue:: dead_discard"
    [src/worker/completer.rs]="outcomes:: drain:: dead_letter:: timeouts:: shutdown:: foreign_rows faults::a_full_disk"
    [src/worker/dispatcher.rs]="outcomes:: timeouts:: shutdown:: ordering:: drain:: retention:: wakeups:: faults::a_full_disk"
    [src/worker/renewal.rs]="timeouts:: shutdown:: wakeups::"
    [src/worker/executor.rs]="outcomes:: timeouts:: shutdown:: ordering::"
    [src/worker/maintenance/scheduler.rs]="scheduler periodic::"
    [src/worker/change_watch.rs]="worker::change_watch wakeups:: ordering:: multiprocess::"
)
ORDER=(src/job/retry.rs src/limits/rate.rs src/limits/breaker.rs
    src/storage/sqlite/jobs/insert.rs src/storage/sqlite/jobs/claim.rs src/storage/sqlite/jobs/row_rules.rs
    src/storage/sqlite/jobs/complete.rs src/storage/sqlite/jobs/reap.rs
    src/worker/completer.rs src/worker/renewal.rs src/worker/executor.rs src/worker/dispatcher.rs
    src/worker/maintenance/scheduler.rs src/worker/change_watch.rs)

# Equivalent mutants, excluded. Each changes how fast or how often something happens, or
# what a log line says, never which outcome a job gets or when a user can see it; the bench
# measures speed, and a test must not depend on timing.
# - WriterHandle::nudge: a wake-up that saves the dispatcher at most COLLECT_INTERVAL (5 ms):
#   while jobs are in flight it collects outcomes (and claims) at least that often anyway.
# - claim (jobs.rs), its match guard `is_constraint_violation` made true: any claim error is
#   taken for a row that breaks a rule; the sweep for such rows finds none, and the claim
#   that runs again returns the same error.
# - claim_rows' early return (`||` made `&&`): for a zero limit or no job types the query
#   itself returns no rows (`LIMIT 0`, `IN ()`); the return only saves the query.
# - any_due made `Ok(true)`: the cheap look before a claim answers "maybe" every time, so an
#   idle worker takes the write lock at each poll; the claim still finds nothing.
# - Completer::len: only the count in the log line of outcomes left unwritten at shutdown.
# - Completer::due: decides when the batch is written (full, urgent, nothing running, or
#   lingered 2 ms), never what: each mutant writes every outcome at once or within the
#   linger (a test checks an outcome is written while another job still runs).
# - Completer::linger_ends: when the dispatcher wakes to write a lingering batch; without
#   it the next round (at most COLLECT_INTERVAL later) writes it.
# - Slot::deadline: wakes the dispatcher at a running attempt's deadline; while an attempt
#   runs the dispatcher looks every COLLECT_INTERVAL anyway, so a timeout is still seen
#   within 5 ms.
# - QueueFeed::finished_one: decides whether a finished job nudges the dispatcher (see
#   nudge); its bookkeeping of jobs in flight only times wake-ups, never what is claimed.
# - executor_loop's lease check (`<` made `<=`): a lease that ends exactly when the
#   attempt needs it is extended anyway, one more write.
# - executor_loop's `stopping` guard made false: a job a thread took just before shutdown
#   runs (shutdown waits for it within the grace) instead of being given back at once;
#   both are what shutdown promises for a job already taken.
# - The dispatcher's claim pacing (claim_threshold, QueueRuntime::wanted made 1,
#   needs_claim's `>` made `>=`, Dispatcher::round's plan and `maybe_more` after a claim or
#   a reap, poll_due's filter, push_pending's `*=`, has_work's `nothing_running`): how many
#   jobs a claim takes and how soon the next claim or poll comes. Every job is still claimed
#   within the bound (a test holds the bound across queues) and run; only batch sizes and
#   latency change. A claim asked for 0 jobs returns none.
# - Dispatcher::run's first poll made immediate, reaping at every claim round: one extra
#   read or reap, same result.
# - Dispatcher::next_wake's renewal wake-up made later (`-` made `+`): while prefetched jobs
#   wait, the dispatcher looks every COLLECT_INTERVAL anyway, far inside the half grace.
# - The shutdown's "outcomes left unwritten" log guard: a log line.
# - change_watch.rs's FileWatch::start made Ok(Default::default()): the stub of systems
#   without inotify is not compiled on Linux (its mutant changes nothing here), and the
#   Linux FileWatch has no Default (unviable).
# - Dispatcher::watching made true (or its `&&`s made `||`, `> 0` made `>= 0`): a busy
#   worker also looks for other processes' commits and keeps its file watch on; a look
#   finds a commit and polls only the queues that have room. Cost only; the bench
#   measures it.
# - Scheduler: cron_latest's window bounds at equality (the walk from an earlier window
#   reaches the same slot). SchedulerThread::stop made (): dropping it closes the stop
#   channel, which ends the thread at its next wait; only a tick already under way is not
#   waited for, and no test can hold one open at shutdown without racing it.
# - completer.rs's success_of made None (or its Succeeded arm deleted): every success is
#   written alone through write_completion instead of with its neighbours: the same rows
#   and the same fence, a statement each. Speed only.
# - jobs.rs's insert_many threshold (`<` made `<=`, `==` or `>`): which batches go in with
#   the CHECK rules off for the connection. The rows are the same either way (a test holds
#   every validated row to the rules, and checks they are on again). Speed only.
# Mutants that make a loop wake for nothing (a core spent while idle, backing off or
# shutting down) are not equivalent: tests/wakeups.rs bounds the dispatcher's wake-ups and
# write rounds (Worker::activity) in windows where nothing is due.
EXCLUDE_RE=(
    --exclude-re 'WriterHandle::nudge'
    --exclude-re 'success_of -> Option<Success<.a>> with None$'
    --exclude-re 'delete match arm Outcome::Succeeded\{result, progress\} in success_of$'
    --exclude-re 'replace < with (<=|==|>) in insert_many$'
    --exclude-re 'replace match guard super::errors::is_constraint_violation\(&e\) with true in claim$'
    --exclude-re 'replace \|\| with && in claim_rows$'
    --exclude-re 'any_due -> Result<bool> with Ok\(true\)$'
    --exclude-re 'Completer::len -> usize'
    --exclude-re 'Completer::due -> bool with true$'
    --exclude-re 'replace && with \|\| in Completer::due$'
    --exclude-re 'completer\.rs:12[45]:17: replace \|\| with && in Completer::due$'
    --exclude-re 'replace >= with < in Completer::due$'
    --exclude-re 'replace \+ with - in Completer::due$'
    --exclude-re 'Completer::linger_ends -> Option<Instant> with None$'
    --exclude-re 'replace \+ with - in Completer::linger_ends$'
    --exclude-re 'Slot::deadline'
    --exclude-re 'QueueFeed::finished_one'
    --exclude-re 'replace < with <= in executor_loop$'
    --exclude-re 'replace match guard shared\.stopping\.load\(Ordering::SeqCst\) with false in executor_loop$'
    --exclude-re 'claim_threshold -> usize with [01]$'
    --exclude-re 'replace \+ with \* in claim_threshold$'
    --exclude-re 'replace / with [%*] in claim_threshold$'
    --exclude-re 'QueueRuntime::wanted -> usize with 1$'
    --exclude-re 'replace > with >= in QueueRuntime::needs_claim$'
    --exclude-re 'dispatcher\.rs:201:44: replace \+ with - in Dispatcher::run$'
    --exclude-re 'replace \+= with \*= in Dispatcher::push_pending$'
    --exclude-re 'replace == with != in Dispatcher::has_work$'
    --exclude-re 'dispatcher\.rs:402:(39: replace && with \|\||61: replace > with >=) in Dispatcher::poll_due$'
    --exclude-re 'dispatcher\.rs:470:26: replace && with \|\| in Dispatcher::round$'
    --exclude-re 'dispatcher\.rs:(479:43|532:23): replace > with >= in Dispatcher::round$'
    --exclude-re 'dispatcher\.rs:545:(47: replace \|\| with &&|39: replace == with !=|50: delete !) in Dispatcher::round$'
    --exclude-re 'dispatcher\.rs:376:34: replace - with \+ in Dispatcher::next_wake$'
    --exclude-re 'dispatcher\.rs:628:12: delete ! in Dispatcher::shutdown$'
    --exclude-re 'scheduler\.rs:(268:32|274:19): replace > with >= in cron_latest$'
    --exclude-re 'replace SchedulerThread::stop with \(\)$'
    --exclude-re 'replace file_watch::FileWatch::start -> std::io::Result<FileWatch> with Ok\(Default::default\(\)\)$'
    --exclude-re 'Dispatcher::watching -> bool with true$'
    --exclude-re 'replace && with \|\| in Dispatcher::watching$'
    --exclude-re 'replace > with >= in Dispatcher::watching$'
)
# An exclusion that matches no mutant is stale (the code moved or changed): say so, so that
# its line numbers get updated rather than silently excluding nothing or something else.
listed=$(for f in "${ORDER[@]}"; do cargo mutants --list --file "$f"; done)
for ((i = 1; i < ${#EXCLUDE_RE[@]}; i += 2)); do
    if ! grep -qE -- "${EXCLUDE_RE[$i]}" <<<"$listed"; then
        echo "warning: the exclusion '${EXCLUDE_RE[$i]}' matches no mutant; update it" >&2
    fi
done

# Tests wait at most this long for an event (see tests/support/scripted.rs): a mutant that
# stops the event is caught in seconds. Run on an otherwise idle machine.
export LITEJOBS_TEST_WAIT_SECS="${LITEJOBS_TEST_WAIT_SECS:-5}"

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files=("${ORDER[@]}")
fi

summary=()
for file in "${files[@]}"; do
    filters="${TESTS[$file]:-}"
    if [ -z "$filters" ]; then
        echo "no test subset is set for $file; add it to TESTS in $0" >&2
        exit 2
    fi
    out="target/mutants/$(echo "$file" | tr '/' '_')"
    mkdir -p "$out"
    echo "== $file (tests: $filters)"
    # cargo-mutants exits non-zero when mutants are missed; the summary says which.
    # shellcheck disable=SC2086
    # nextest stops at the first failing test, so a mutant that makes tests wait out their
    # bounds (an event that never comes) is caught by the first bound, not by the timeout.
    cargo mutants --file "$file" --jobs "${MUTANTS_JOBS:-1}" --output "$out" \
        --test-tool nextest --profile mutants --timeout-multiplier 3 --minimum-test-timeout 90 \
        ${MUTANTS_RE:+--re "$MUTANTS_RE"} \
        "${EXCLUDE_RE[@]}" -- --lib --test integration $filters || true
    dir="$out/mutants.out"
    count() { if [ -s "$dir/$1" ]; then grep -c . "$dir/$1"; else echo 0; fi; }
    caught=$(count caught.txt)
    missed=$(count missed.txt)
    timeout=$(count timeout.txt)
    unviable=$(count unviable.txt)
    rate=$(awk -v c="$caught" -v m="$missed" \
        'BEGIN { n = c + m; if (n == 0) print "-"; else printf "%.0f %%", 100 * c / n }')
    summary+=("$(printf '%-32s caught %4s  missed %3s  timeouts %3s  unviable %3s  kill rate %s' \
        "$file" "$caught" "$missed" "$timeout" "$unviable" "$rate")")
    if [ "$missed" != 0 ]; then
        sed 's/^/    missed: /' "$dir/missed.txt"
    fi
done

echo
echo "== summary (kill rate = caught / (caught + missed); timeouts are listed apart and investigated)"
printf '%s\n' "${summary[@]}"
