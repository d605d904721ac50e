#!/usr/bin/env bash
# A throwaway PostgreSQL server on 127.0.0.1 for the tests of the `postgres` feature.
#
#   eval "$(scripts/pg-server.sh start)"   # prints LITEJOBS_TEST_PG=postgres://… and PG_DIR=…
#   scripts/pg-server.sh stop "$PG_DIR"
#
# initdb into a temporary folder, fsync off (a test server loses nothing that matters), run as
# the `postgres` user through runuser when started as root (PostgreSQL refuses root).
set -euo pipefail

find_bin() {
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
        pg_config --bindir
    elif command -v initdb >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
    else
        ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1
    fi
}

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
start)
    bin=$(find_bin)
    [ -x "$bin/initdb" ] || { echo "no PostgreSQL server binaries (initdb) found" >&2; exit 1; }
    dir=$(mktemp -d /tmp/litejobs-pg.XXXXXX)
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    port=$((20000 + RANDOM % 20000))
    as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >/dev/null
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
        start >/dev/null
    echo "export LITEJOBS_TEST_PG=postgres://postgres@127.0.0.1:$port/postgres"
    echo "export PG_DIR=$dir"
    ;;
stop)
    dir=${2:?usage: pg-server.sh stop PG_DIR}
    bin=$(find_bin)
    as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
*)
    echo "usage: pg-server.sh start | stop PG_DIR" >&2
    exit 2
    ;;
esac
