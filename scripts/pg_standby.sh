#!/usr/bin/env bash
# A PostgreSQL primary and a streaming standby on this machine, for failover tests.
#
# Two clusters of our own, never the main one: txs_fo1 on 127.0.0.1:5434 and txs_fo2 on
# 127.0.0.1:5435 (trust authentication, like the test cluster). Which one is the
# primary changes with every failover; `status` says. Every command is idempotent and
# touches nothing but these two clusters (the cluster on 5432 is left as it is).
#
#   scripts/pg_standby.sh up [sync|async]   create/start both; the standby streams from the
#                                           primary; sync: synchronous_standby_names='*'
#   scripts/pg_standby.sh mode sync|async   set the primary's replication mode (reload)
#   scripts/pg_standby.sh promote NAME      promote standby NAME (waits until it accepts writes)
#   scripts/pg_standby.sh rebuild NAME      make NAME (stopped or dead) a fresh standby of the
#                                           other cluster (pg_basebackup)
#   scripts/pg_standby.sh status            one line per cluster: name port role state
#   scripts/pg_standby.sh down              stop and drop both clusters
#
# Needs root (or the postgres user) and the Debian postgresql-common tools
# (pg_createcluster, pg_ctlcluster, pg_dropcluster).
set -euo pipefail

VERSION="${TXS_PG_VERSION:-15}"
NAMES=(txs_fo1 txs_fo2)
declare -A PORT=([txs_fo1]=5434 [txs_fo2]=5435)
BIN="/usr/lib/postgresql/${VERSION}/bin"

die() { echo "pg_standby.sh: $*" >&2; exit 1; }

as_postgres() {
    if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi
}

check_name() {
    case "${1:-}" in
        txs_fo1 | txs_fo2) ;;
        *) die "unknown cluster '${1:-}' (only txs_fo1 and txs_fo2 are ours)" ;;
    esac
}

other() { [ "$1" = txs_fo1 ] && echo txs_fo2 || echo txs_fo1; }
datadir() { echo "/var/lib/postgresql/${VERSION}/$1"; }
confdir() { echo "/etc/postgresql/${VERSION}/$1"; }
exists() { [ -f "$(confdir "$1")/postgresql.conf" ] && [ -d "$(datadir "$1")" ]; }
running() { pg_isready -q -h 127.0.0.1 -p "${PORT[$1]}"; }
psql_on() { as_postgres psql -X -q -At -h 127.0.0.1 -p "${PORT[$1]}" -d postgres -c "$2"; }
role() {
    if ! running "$1"; then echo down; return; fi
    if [ "$(psql_on "$1" 'SELECT pg_is_in_recovery()')" = t ]; then echo standby; else echo primary; fi
}

write_config() {
    local name="$1" conf
    conf="$(confdir "$name")"
    mkdir -p "$conf/conf.d"
    cat >"$conf/conf.d/txs_failover.conf" <<EOF
# written by scripts/pg_standby.sh
listen_addresses = '127.0.0.1'
port = ${PORT[$name]}
max_connections = 60
shared_buffers = 32MB
wal_level = replica
max_wal_senders = 5
wal_keep_size = '256MB'
hot_standby = on
fsync = on
synchronous_commit = on
wal_receiver_status_interval = 1s
EOF
    cat >"$conf/pg_hba.conf" <<EOF
# written by scripts/pg_standby.sh: trust, like the test cluster on 5432
local all all trust
host all all 127.0.0.1/32 trust
local replication all trust
host replication all 127.0.0.1/32 trust
EOF
    chown -R postgres:postgres "$conf"
}

create() {
    local name="$1"
    exists "$name" && return 0
    if [ -d "$(confdir "$name")" ] || [ -d "$(datadir "$name")" ]; then
        pg_dropcluster --stop "$VERSION" "$name" 2>/dev/null || true
        rm -rf "$(confdir "$name")" "$(datadir "$name")"
    fi
    pg_createcluster -q -p "${PORT[$name]}" --start-conf=manual "$VERSION" "$name" -- \
        --auth=trust >/dev/null
    write_config "$name"
}

start() {
    running "$1" && return 0
    pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$1" start
    for _ in $(seq 1 60); do running "$1" && return 0; sleep 0.5; done
    die "$1 did not start"
}

stop() {
    if running "$1" || [ -f "$(datadir "$1")/postmaster.pid" ]; then
        pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$1" stop -m immediate 2>/dev/null || true
    fi
}

set_mode() {
    local primary="$1" mode="$2" file
    file="$(confdir "$primary")/conf.d/txs_sync.conf"
    case "$mode" in
        sync) echo "synchronous_standby_names = '*'" >"$file" ;;
        async) echo "synchronous_standby_names = ''" >"$file" ;;
        *) die "mode must be sync or async, not '$mode'" ;;
    esac
    chown postgres:postgres "$file"
    # A standby never needs one; and a promoted standby must not wait for a standby.
    rm -f "$(confdir "$(other "$primary")")/conf.d/txs_sync.conf"
    psql_on "$primary" 'SELECT pg_reload_conf()' >/dev/null
}

wait_streaming() {
    local primary="$1" mode="$2" want="async"
    [ "$mode" = sync ] && want="sync"
    for _ in $(seq 1 120); do
        if [ "$(psql_on "$primary" "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = '$want'")" = 1 ]; then
            return 0
        fi
        sleep 0.25
    done
    die "no $want standby streaming from $primary"
}

rebuild() {
    local name="$1" source
    source="$(other "$name")"
    [ "$(role "$source")" = primary ] || die "cannot rebuild $name: $source is not a running primary"
    create "$name"
    stop "$name"
    rm -rf "$(datadir "$name")"
    install -d -m 700 -o postgres -g postgres "$(datadir "$name")"
    as_postgres "$BIN/pg_basebackup" -h 127.0.0.1 -p "${PORT[$source]}" -U postgres \
        -D "$(datadir "$name")" -R -X stream -c fast \
        -d "application_name=$name"
    rm -f "$(confdir "$name")/conf.d/txs_sync.conf"
    start "$name"
}

primary_of() {
    local found=""
    for name in "${NAMES[@]}"; do
        if [ "$(role "$name")" = primary ]; then found="$found $name"; fi
    done
    echo "$found" | xargs
}

up() {
    local mode="${1:-sync}" primary
    for name in "${NAMES[@]}"; do create "$name"; done
    primary="$(primary_of)"
    if [ -z "$primary" ]; then
        # Nothing runs as a primary: start txs_fo1 unless it is a standby's data.
        if [ -f "$(datadir txs_fo1)/standby.signal" ] && [ -f "$(datadir txs_fo2)/PG_VERSION" ] \
            && [ ! -f "$(datadir txs_fo2)/standby.signal" ]; then
            primary=txs_fo2
        else
            primary=txs_fo1
        fi
        rm -f "$(datadir "$primary")/standby.signal"
        start "$primary"
    fi
    [ "$(echo "$primary" | wc -w)" = 1 ] || die "more than one primary running: $primary"
    local standby
    standby="$(other "$primary")"
    if [ "$(role "$standby")" != standby ] \
        || [ "$(psql_on "$primary" "SELECT count(*) FROM pg_stat_replication WHERE application_name = '$standby'")" != 1 ]; then
        rebuild "$standby"
    fi
    set_mode "$primary" "$mode"
    wait_streaming "$primary" "$mode"
}

promote() {
    local name="$1"
    [ "$(role "$name")" = standby ] || die "$name is not a running standby"
    pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$name" promote
    for _ in $(seq 1 120); do
        [ "$(role "$name")" = primary ] && return 0
        sleep 0.1
    done
    die "$name did not finish its promotion"
}

status() {
    for name in "${NAMES[@]}"; do
        local state=absent
        exists "$name" && state=present
        echo "$name ${PORT[$name]} $(role "$name") $state"
    done
}

down() {
    for name in "${NAMES[@]}"; do
        if [ -d "$(confdir "$name")" ] || [ -d "$(datadir "$name")" ]; then
            stop "$name"
            pg_dropcluster "$VERSION" "$name" 2>/dev/null || rm -rf "$(confdir "$name")" "$(datadir "$name")"
        fi
    done
}

command -v pg_createcluster >/dev/null || die "pg_createcluster not found (Debian postgresql-common)"
[ -x "$BIN/pg_basebackup" ] || die "PostgreSQL $VERSION binaries not found in $BIN"

case "${1:-}" in
    up) up "${2:-sync}" ;;
    mode)
        primary="$(primary_of)"
        [ -n "$primary" ] || die "no primary running"
        set_mode "$primary" "${2:-}"
        wait_streaming "$primary" "${2:-}"
        ;;
    promote) check_name "${2:-}"; promote "$2" ;;
    rebuild) check_name "${2:-}"; rebuild "$2" ;;
    status) status ;;
    down) down ;;
    *) die "usage: $0 up [sync|async] | mode sync|async | promote NAME | rebuild NAME | status | down" ;;
esac
