#!/usr/bin/env bash
# A local Redis Cluster for SOLARIS: 6 redis-server processes on loopback, 3 masters and
# 3 replicas, so the online store, the streams, serving and a failover can be tried on a
# real cluster without Docker.
#
#   scripts/redis_cluster.sh start  [--base-port N] [--dir D] [--node-timeout MS]
#   scripts/redis_cluster.sh status [--base-port N] [--dir D]
#   scripts/redis_cluster.sh stop   [--base-port N] [--dir D]
#
# Nodes listen on 127.0.0.1:N..N+5 (default N=7000; cluster bus N+10000..N+10005) with
# --bind 127.0.0.1 --protected-mode yes, keep nothing on disk (no RDB, no AOF) and run the
# online store's server settings (solaris.store.keys.SERVER_SETTINGS, read from Python:
# their one home). Their cluster-config files, pid files and logs live under D (default
# ${TMPDIR:-/tmp}/solaris-redis-cluster-N). --node-timeout (cluster-node-timeout, default
# 2000 ms) is how long a master may be unreachable before its replica takes over: low, so
# a failover drill (bench/cluster_drill.py) is short.
#
# `start` prints the connection string on a line of its own, then how to use it. `stop`
# shuts the nodes down and removes D (only a directory this script created). Refuses, with
# a message, when redis-server or redis-cli is missing or a port is busy.
set -euo pipefail

usage() {
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

die() {
    echo "redis_cluster.sh: $*" >&2
    exit 1
}

[[ $# -ge 1 ]] || usage
action=$1
shift
base=7000
dir=""
node_timeout=2000
while [[ $# -gt 0 ]]; do
    case $1 in
        --base-port) base=${2:?--base-port needs a value}; shift 2 ;;
        --dir) dir=${2:?--dir needs a value}; shift 2 ;;
        --node-timeout) node_timeout=${2:?--node-timeout needs a value}; shift 2 ;;
        -h | --help) usage ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ $base =~ ^[0-9]+$ ]] && ((base >= 1024 && base + 10005 <= 65535)) \
    || die "--base-port must be a number in 1024..55530 (the bus ports are base+10000..base+10005), got '$base'"
[[ $node_timeout =~ ^[0-9]+$ ]] && ((node_timeout >= 100)) \
    || die "--node-timeout must be milliseconds >= 100, got '$node_timeout'"
dir=${dir:-${TMPDIR:-/tmp}/solaris-redis-cluster-$base}
MARKER=.solaris-redis-cluster
ports=()
for k in 0 1 2 3 4 5; do ports+=($((base + k))); done

need_binaries() {
    local b
    for b in redis-server redis-cli; do
        command -v "$b" >/dev/null \
            || die "$b is not installed (Debian: apt-get install redis-server redis-tools)"
    done
}

busy() { # whether something accepts connections on 127.0.0.1:$1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

server_settings() { # the online store's settings as redis-server arguments, one a line
    local repo python
    repo=$(cd "$(dirname "$0")/.." && pwd)
    python=${PYTHON:-$repo/.venv/bin/python}
    [[ -x $python ]] || python=$(command -v python3) || die "no Python to read SERVER_SETTINGS"
    PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} "$python" -c '
from solaris.store.keys import SERVER_SETTINGS
for name, value in SERVER_SETTINGS.items():
    print(f"--{name}")
    print(value)
' || die "could not read solaris.store.keys.SERVER_SETTINGS with $python (set PYTHON=...)"
}

cli() { # redis-cli on one node, short timeouts
    redis-cli -h 127.0.0.1 -p "$1" "${@:2}"
}

cluster_ok() { # every node reports cluster_state:ok, knows 6 nodes and its replicas are linked
    local p info
    for p in "${ports[@]}"; do
        info=$(cli "$p" cluster info 2>/dev/null) || return 1
        [[ $info == *cluster_state:ok* && $info == *cluster_known_nodes:6* ]] || return 1
        info=$(cli "$p" info replication 2>/dev/null) || return 1
        [[ $info != *role:slave* || $info == *master_link_status:up* ]] || return 1
    done
}

connection_string() {
    local IFS=,
    local nodes=()
    local p
    for p in "${ports[@]}"; do nodes+=("127.0.0.1:$p"); done
    echo "${nodes[*]}"
}

start() {
    need_binaries
    local p
    for p in "${ports[@]}"; do
        busy "$p" && die "port $p is busy (another Redis Cluster? try 'stop' or --base-port)"
        busy $((p + 10000)) && die "cluster bus port $((p + 10000)) is busy (try --base-port)"
    done
    [[ -e $dir && ! -e $dir/$MARKER ]] && die "$dir exists and is not this script's (use --dir)"
    rm -rf -- "$dir" # a stale cluster of this script whose nodes are gone (ports are free)
    local settings=()
    mapfile -t settings < <(server_settings)
    mkdir -p "$dir"
    touch "$dir/$MARKER"
    echo "${ports[*]}" >"$dir/ports"
    for p in "${ports[@]}"; do
        mkdir -p "$dir/$p"
        redis-server --port "$p" --bind 127.0.0.1 --protected-mode yes \
            --save "" --appendonly no \
            --cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" \
            --cluster-node-timeout "$node_timeout" \
            --dir "$dir/$p" --pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" \
            --daemonize yes "${settings[@]}" \
            || { abort "redis-server on port $p did not start: $(tail -n 3 "$dir/$p/redis.log" 2>/dev/null)"; }
    done
    local deadline=$((SECONDS + 15))
    for p in "${ports[@]}"; do
        until [[ $(cli "$p" ping 2>/dev/null) == PONG ]]; do
            ((SECONDS < deadline)) || { abort "node $p did not answer PING"; }
            sleep 0.1
        done
    done
    local nodes=()
    for p in "${ports[@]}"; do nodes+=("127.0.0.1:$p"); done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 \
        || { abort "redis-cli --cluster create failed: $(tail -n 5 "$dir/create.log")"; }
    deadline=$((SECONDS + 60))
    until cluster_ok; do
        ((SECONDS < deadline)) || { abort "the cluster did not reach cluster_state:ok"; }
        sleep 0.2
    done
    local conn
    conn=$(connection_string)
    echo "$conn"
    cat <<EOF
Redis Cluster up: 3 masters + 3 replicas on 127.0.0.1:${ports[0]}..${ports[5]}, cluster-node-timeout ${node_timeout} ms, files in $dir
Use it:  SOLARIS_STORE__REDIS=$conn SOLARIS_STORE__REDIS_TYPE=redis_cluster ...
Stop it: $0 stop --base-port $base --dir $dir
EOF
}

abort() { # a start that failed: stop what started, remove $dir, then die with "$@"
    stop_nodes
    rm -rf -- "$dir"
    die "$@"
}

stop_nodes() { # shut down every node of $dir (SHUTDOWN NOSAVE, then SIGKILL if needed)
    local p pid
    for p in "${ports[@]}"; do
        pid=$(cat "$dir/$p/redis.pid" 2>/dev/null || true)
        cli "$p" shutdown nosave >/dev/null 2>&1 || true
        if [[ -n $pid ]]; then
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
}

stop() {
    if [[ ! -e $dir/$MARKER ]]; then
        echo "no cluster of this script in $dir"
        return 0
    fi
    read -r -a ports <"$dir/ports"
    stop_nodes
    rm -rf -- "$dir"
    echo "Redis Cluster on 127.0.0.1:${ports[0]}..${ports[5]} stopped; $dir removed"
}

status() {
    need_binaries
    [[ -e $dir/$MARKER ]] && read -r -a ports <"$dir/ports"
    local p
    for p in "${ports[@]}"; do
        if [[ $(cli "$p" ping 2>/dev/null) == PONG ]]; then
            echo "127.0.0.1:$p $(cli "$p" role | head -n 1) $(cli "$p" cluster info | tr -d '\r' | grep '^cluster_state:')"
        else
            echo "127.0.0.1:$p down"
        fi
    done
}

case $action in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "unknown action '$action' (start, stop or status)" ;;
esac
