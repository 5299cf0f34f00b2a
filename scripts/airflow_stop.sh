#!/usr/bin/env bash
# `make airflow-stop`: stop the `make airflow` (or `make airflow-celery`) of this repository,
# every process of it: SIGTERM to its process group, then SIGKILL for what is left after 20 s
# (the LocalExecutor's workers ignore SIGTERM).
#
#   scripts/airflow_stop.sh            the group kept in $AIRFLOW_HOME/standalone.pgid
#   scripts/airflow_stop.sh PGID       that process group
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AIRFLOW_HOME="${AIRFLOW_HOME:-$ROOT/.airflow}"
pgid_file="$AIRFLOW_HOME/standalone.pgid"
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
    sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi
group="${1:-}"
if [[ -z "$group" ]]; then
    if [[ ! -f "$pgid_file" ]]; then
        echo "airflow_stop.sh: no Airflow of this repository is running ($pgid_file absent)"
        exit 0
    fi
    group="$(cat "$pgid_file")"
fi
if [[ ! "$group" =~ ^[0-9]+$ ]]; then
    echo "airflow_stop.sh: '$group' is not a process group id" >&2
    exit 2
fi
alive() { kill -0 -- "-$group" 2>/dev/null; }
if alive; then
    kill -TERM -- "-$group" 2>/dev/null || true
    for _ in $(seq 1 40); do
        alive || break
        sleep 0.5
    done
    if alive; then
        echo "airflow_stop.sh: SIGKILL for what ignored SIGTERM in process group $group"
        kill -KILL -- "-$group" 2>/dev/null || true
    fi
fi
rm -f "$pgid_file"
echo "Airflow stopped (process group $group)"
