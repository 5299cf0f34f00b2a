# Sourced by scripts/airflow_standalone.sh and scripts/airflow_replay.sh: the environment of
# the local Airflow (AIRFLOW_HOME, DAG and plugin folders, metadata DB, loopback UI). Expects
# ROOT (the repository) and AIRFLOW (the airflow executable) to be set.

# `airflow standalone` starts its components as `airflow ...` subprocesses found on PATH.
PATH="$(dirname "$AIRFLOW"):$PATH"
export PATH
export AIRFLOW_HOME="${AIRFLOW_HOME:-$ROOT/.airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$ROOT/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# [dag_processor] refresh_interval: how often the DAGs folder is listed for new files
# (default 300 s); min_file_process_interval: how often a known file is re-parsed (default 30).
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=30
export AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=30
# No settings file and no FM named: the MovieLens example's adapters (what `make demo`
# trained), as the SOLARIS_* variables that set them; name yours with SOLARIS_CONFIG.
if [[ -z "${SOLARIS_CONFIG:-}" && -z "${SOLARIS_MODEL__FOUNDATION:-}" ]]; then
    while IFS= read -r setting; do
        export "${setting?}"
    done < <(cd "$ROOT" && "$ROOT/.venv/bin/python" -m solaris.examples.movielens.settings)
    echo "settings      the MovieLens example's adapters (SOLARIS_CONFIG unset)"
fi
# The settings' artifacts folder (and state URI), read once by SolarisConfig from
# SOLARIS_CONFIG and the SOLARIS_* variables, and exported absolute: the tasks and the SOLARIS
# page then read the same folder whatever their working directory. (A default exported here
# instead would override the config file's artifacts_dir: every task of an adopter's config
# looked for its models in <repo>/artifacts.)
if ! solaris_settings="$(cd "$ROOT" && "$ROOT/.venv/bin/python" -c '
import sys
from solaris.config import SolarisConfig
from solaris.errors import SolarisError
try:
    cfg = SolarisConfig.load()
except SolarisError as exc:
    sys.exit(f"SOLARIS settings: {exc}")
print(cfg.artifacts_dir.resolve())
print(cfg.cycle.state_uri or "")
')"; then
    echo "the SOLARIS settings (SOLARIS_CONFIG, SOLARIS_*) cannot be loaded; see above" >&2
    exit 1
fi
SOLARIS_ARTIFACTS_DIR="$(sed -n 1p <<<"$solaris_settings")"
export SOLARIS_ARTIFACTS_DIR
if [[ -n "$(sed -n 2p <<<"$solaris_settings")" ]]; then
    SOLARIS_CYCLE__STATE_URI="$(sed -n 2p <<<"$solaris_settings")"
    export SOLARIS_CYCLE__STATE_URI
fi
# Scheduled runs start as soon as a DAG is parsed (AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION
# =True to start them paused).
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-False}"
# The api-server (UI, REST and Execution API) listens on the loopback only, unless told
# otherwise (AIRFLOW__API__HOST=0.0.0.0 exposes it on every interface). `airflow standalone`
# starts `airflow api-server` without --host, so [api] host is what it binds.
export AIRFLOW__API__HOST="${AIRFLOW__API__HOST:-127.0.0.1}"
export AIRFLOW__API__PORT="${AIRFLOW__API__PORT:-8080}"
# Where a client on this machine reaches it: the bound address, or the loopback when it
# listens on every interface (not exported: a shell variable for the scripts' messages).
case "$AIRFLOW__API__HOST" in
    0.0.0.0) airflow_api_host=127.0.0.1 ;;
    :: | "[::]") airflow_api_host="[::1]" ;;
    \[*) airflow_api_host="$AIRFLOW__API__HOST" ;;
    *:*) airflow_api_host="[$AIRFLOW__API__HOST]" ;;
    *) airflow_api_host="$AIRFLOW__API__HOST" ;;
esac
airflow_url="http://$airflow_api_host:$AIRFLOW__API__PORT"
# Task processes report to the Execution API; Airflow's default, http://localhost:8080/
# execution/, misses a server on another port (and "localhost" may be ::1 first).
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:-$airflow_url/execution/}"

if [[ -n "${SOLARIS_AIRFLOW_DB_URL:-}" ]]; then
    export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="$SOLARIS_AIRFLOW_DB_URL"
elif [[ -z "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-}" ]]; then
    export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
fi


# Task processes fork from workers that imported the cycle's libraries once
# (solaris.orchestration.warm): without it every task spends seconds importing Feast and torch.
# The Celery variant (scripts/airflow_celery.sh) sets CeleryExecutor and the warm Celery config.
export AIRFLOW__CORE__EXECUTOR="${AIRFLOW__CORE__EXECUTOR:-solaris.orchestration.warm.WarmLocalExecutor}"
# Task slots. The LocalExecutor forks this many workers when it starts (Airflow's default is
# 32): 4 on one 2-core machine, two CPU-bound tasks a core at most (each task process stays
# under 1.5 GB: docs/scaling.md), and one DAG may use them all (Airflow's default per DAG is
# 16). A cluster's scheduler ships 32 (docker/compose.yaml, deploy/helm/values.yaml).
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"
export AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG="${AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG:-$AIRFLOW__CORE__PARALLELISM}"
# The most mapped task instances Airflow accepts for one task (its default, spelled out): the
# cycle's plans stay within cycle.max_mapped_tasks (256), and refuse a cap above this.
export AIRFLOW__CORE__MAX_MAP_LENGTH="${AIRFLOW__CORE__MAX_MAP_LENGTH:-1024}"
# A scheduler loop that found nothing to do sleeps this long (Airflow's default 1 s); every
# hop of an interval's chain of short tasks (about six) waits for the next loop.
export AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME="${AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME:-0.2}"

# What every launcher does before it starts Airflow (a function: airflow_replay.sh sources
# this file without it): the metadata DB's tables, the embedding tasks' pool (cycle.gpu_pool;
# one slot, one FM embedding task at a time), and the Feast definitions of the configured
# namespace, once, as a deploy step (the tasks only check them; without Redis yet, the
# namespace's first task applies them instead).
airflow_setup() {
    "$AIRFLOW" db migrate
    "$AIRFLOW" pools set "${SOLARIS_CYCLE__GPU_POOL:-gpu}" 1 "SOLARIS FM embedding"
    "$ROOT/.venv/bin/solaris" namespace apply ||
        echo "warning: Feast definitions not applied now; the namespace's first task will" >&2
}

# Run "$@" (an Airflow launch) in a process group of its own until it exits, as `make airflow`
# and `make airflow-celery` do: the group id is kept in AIRFLOW_HOME/standalone.pgid, so
# `make airflow-stop` (scripts/airflow_stop.sh) stops it from any shell; Ctrl-C or a SIGTERM
# to the caller stops the whole group (SIGTERM, then SIGKILL for what is left after 20 s: the
# LocalExecutor's workers ignore SIGTERM), and so does the command's own exit (what it left
# running). Returns the command's exit status.
airflow_group() {
    local pgid_file="$AIRFLOW_HOME/standalone.pgid" status=0
    setsid "$@" &
    airflow_group_id=$!
    echo "$airflow_group_id" >"$pgid_file"
    trap 'trap - INT TERM; echo "stopping Airflow (process group $airflow_group_id)";
          bash "$ROOT/scripts/airflow_stop.sh" "$airflow_group_id"; exit 130' INT TERM
    wait "$airflow_group_id" || status=$?
    trap - INT TERM
    bash "$ROOT/scripts/airflow_stop.sh" "$airflow_group_id" >/dev/null
    rm -f "$pgid_file"
    return "$status"
}
