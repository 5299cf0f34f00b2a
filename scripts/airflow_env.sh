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
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
# [dag_processor] refresh_interval: how often the DAGs folder is listed for new files
# (default 300 s); min_file_process_interval: how often a known file is re-parsed (default 30).
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=30
export AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=30
export SOLARIS_ARTIFACTS_DIR="${SOLARIS_ARTIFACTS_DIR:-$ROOT/artifacts}"
# Loopback only, unless told otherwise (AIRFLOW__API__HOST=0.0.0.0 to expose the UI).
export AIRFLOW__API__HOST="${AIRFLOW__API__HOST:-127.0.0.1}"

if [[ -n "${SOLARIS_AIRFLOW_DB_URL:-}" ]]; then
    export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="$SOLARIS_AIRFLOW_DB_URL"
elif [[ -z "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-}" ]]; then
    export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
fi

