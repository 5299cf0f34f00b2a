#!/usr/bin/env bash
# `make airflow`: the SOLARIS DAGs and the SOLARIS UI page in a local `airflow standalone`.
#
# Everything Airflow keeps lives in AIRFLOW_HOME (default <repo>/.airflow, git-ignored). The
# metadata DB is SQLite in AIRFLOW_HOME unless SOLARIS_AIRFLOW_DB_URL (or
# AIRFLOW__DATABASE__SQL_ALCHEMY_CONN) names another, for instance
#   SOLARIS_AIRFLOW_DB_URL=postgresql+psycopg2://postgres@127.0.0.1:5432/airflow make airflow
# (the database must exist; `airflow db migrate` creates the tables).
#
# Steps: migrate the DB, create the "gpu" pool (one slot: one FM embedding task at a time),
# print the UI address and how to log in, then start `airflow standalone` (api-server,
# scheduler, dag-processor and triggerer in one process group; Ctrl-C, a SIGTERM to this
# script or `make airflow-stop` stops every process of it).
# By default nothing listens beyond the loopback: the api-server binds AIRFLOW__API__HOST (default
# 127.0.0.1; port AIRFLOW__API__PORT, default 8080), and no task-log server is started.
#
# Check mode, for CI: `scripts/airflow_standalone.sh --check` (or SOLARIS_AIRFLOW_CHECK=1)
# does the same set-up and then lists the DAGs and plugins instead of starting Airflow.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

check="${SOLARIS_AIRFLOW_CHECK:-0}"
for arg in "$@"; do
    case "$arg" in
        --check) check=1 ;;
        -h | --help)
            sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "airflow_standalone.sh: unknown argument '$arg' (try --help)" >&2
            exit 2
            ;;
    esac
done

AIRFLOW="${SOLARIS_AIRFLOW_BIN:-$ROOT/.venv/bin/airflow}"
if [[ ! -x "$AIRFLOW" ]]; then
    echo "airflow_standalone.sh: no Airflow at $AIRFLOW; run 'make venv' first" >&2
    exit 1
fi

# The environment shared with scripts/airflow_replay.sh (AIRFLOW_HOME, DAGs, DB, ...).
source "$ROOT/scripts/airflow_env.sh"

mkdir -p "$AIRFLOW_HOME" "$AIRFLOW__CORE__DAGS_FOLDER" "$AIRFLOW__CORE__PLUGINS_FOLDER" \
    "$SOLARIS_ARTIFACTS_DIR"

# The DB URL without its password, for the log.
db_shown="$(sed -E 's#(://[^:/@]*):[^@]*@#\1:***@#' <<<"$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")"
echo "AIRFLOW_HOME  $AIRFLOW_HOME"
echo "metadata DB   $db_shown"
echo "DAGs          $AIRFLOW__CORE__DAGS_FOLDER"
echo "plugins       $AIRFLOW__CORE__PLUGINS_FOLDER"
echo "artifacts     $SOLARIS_ARTIFACTS_DIR"

airflow_setup

passwords="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated}"
# The address the api-server binds ($airflow_url, from airflow_env.sh), not a guess.
case "$AIRFLOW__API__HOST" in
    127.* | localhost | ::1 | "[::1]") listens="this machine only" ;;
    *) listens="every interface (AIRFLOW__API__HOST=$AIRFLOW__API__HOST)" ;;
esac
cat <<EOF

Airflow UI    $airflow_url   (the SOLARIS page: $airflow_url/solaris/)
Listening on  $AIRFLOW__API__HOST:$AIRFLOW__API__PORT, $listens
Log in as     admin; the password is generated on the first start and kept in
              $passwords
EOF

if [[ "$check" == 1 ]]; then
    echo
    echo "check mode: not starting Airflow"
    echo "airflow on PATH: $(command -v airflow)"
    "$AIRFLOW" dags list
    "$AIRFLOW" plugins
    exit 0
fi

# `airflow standalone` starts its components as `airflow ...` found on PATH, and the scheduler
# and the triggerer would each start a task-log server on every interface (ports 8793 and
# 8794: Airflow hard-codes the address). On one machine the api-server reads task logs from
# AIRFLOW_HOME/logs itself, so the `airflow` first on PATH starts them with --skip-serve-logs.
shim="$AIRFLOW_HOME/.solaris-bin"
mkdir -p "$shim"
{
    echo '#!/usr/bin/env bash'
    echo '# Written by scripts/airflow_standalone.sh: the `airflow` of `airflow standalone`.'
    echo 'case "${1:-}" in'
    printf '    scheduler | triggerer) exec %q "$1" --skip-serve-logs "${@:2}" ;;\n' "$AIRFLOW"
    echo 'esac'
    printf 'exec %q "$@"\n' "$AIRFLOW"
} >"$shim/airflow"
chmod +x "$shim/airflow"
export PATH="$shim:$PATH"

# `airflow standalone` alone leaves its components behind when it is stopped by its PID, and
# the LocalExecutor's workers ignore SIGTERM: it runs in a process group of its own
# (airflow_group, scripts/airflow_env.sh), which Ctrl-C, a SIGTERM to this script or `make
# airflow-stop` stop as a whole.
status=0
airflow_group "$AIRFLOW" standalone || status=$?
exit "$status"
