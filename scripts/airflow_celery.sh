#!/usr/bin/env bash
# `make airflow-celery`: the SOLARIS DAGs under Airflow's CeleryExecutor on this machine, the
# layout of a cluster: api-server, scheduler, dag-processor, triggerer, and two Celery workers,
# `default` (every task but the FM's) and `gpu` (the queue embed_shard is routed to,
# cycle.gpu_queue; one task at a time). On a cluster each runs on its own machine.
#
# Needs PostgreSQL for the metadata DB (and the Celery result backend), and a broker:
#   SOLARIS_AIRFLOW_DB_URL     default postgresql+psycopg2://postgres@127.0.0.1:5432/airflow
#                              (created if the server lacks it; `airflow db migrate` makes
#                              the tables)
#   SOLARIS_CELERY_BROKER_URL  default amqp://guest:guest@127.0.0.1:5672// (RabbitMQ's own
#                              default account, which it accepts from the loopback only);
#                              redis://127.0.0.1:6379/15 uses Redis instead
#   SOLARIS_CELERY_CONCURRENCY tasks at once on the default worker (default 2)
#
# Everything else is as `make airflow` (scripts/airflow_env.sh): AIRFLOW_HOME, the loopback UI
# on 127.0.0.1:8080, the "gpu" pool. No component starts a task-log server: on one machine the
# api-server reads task logs from AIRFLOW_HOME/logs. Each component's output is prefixed with
# its name; Ctrl-C, `make airflow-stop` or any component exiting stops them all.
#
# Check mode, for CI: `scripts/airflow_celery.sh --check` does the set-up and lists the DAGs
# instead of starting the components.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

check=0
for arg in "$@"; do
    case "$arg" in
        --check) check=1 ;;
        -h | --help)
            sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "airflow_celery.sh: unknown argument '$arg' (try --help)" >&2
            exit 2
            ;;
    esac
done

AIRFLOW="${SOLARIS_AIRFLOW_BIN:-$ROOT/.venv/bin/airflow}"
if [[ ! -x "$AIRFLOW" ]]; then
    echo "airflow_celery.sh: no Airflow at $AIRFLOW; run 'make venv' first" >&2
    exit 1
fi

export SOLARIS_AIRFLOW_DB_URL="${SOLARIS_AIRFLOW_DB_URL:-postgresql+psycopg2://postgres@127.0.0.1:5432/airflow}"
source "$ROOT/scripts/airflow_env.sh"
if [[ "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" != postgresql* ]]; then
    echo "airflow_celery.sh: the CeleryExecutor needs a PostgreSQL metadata DB (SQLite cannot" \
        "be shared by the scheduler and the workers); set SOLARIS_AIRFLOW_DB_URL" >&2
    exit 1
fi

export AIRFLOW__CORE__EXECUTOR=CeleryExecutor
export AIRFLOW__CELERY__BROKER_URL="${SOLARIS_CELERY_BROKER_URL:-amqp://guest:guest@127.0.0.1:5672//}"
# Task states also go to the metadata DB (Celery's database backend, through SQLAlchemy).
export AIRFLOW__CELERY__RESULT_BACKEND="db+$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
# Airflow's Celery settings plus the cycle's preload (solaris.orchestration.warm): the
# workers import the task libraries once, before their pool processes fork.
export AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=solaris.orchestration.warm.CELERY_CONFIG
export AIRFLOW__OPERATORS__DEFAULT_QUEUE="${AIRFLOW__OPERATORS__DEFAULT_QUEUE:-default}"

mkdir -p "$AIRFLOW_HOME" "$SOLARIS_ARTIFACTS_DIR"
redact() { sed -E 's#(://[^:/@]*):[^@]*@#\1:***@#' <<<"$1"; }
gpu_queue="${SOLARIS_CYCLE__GPU_QUEUE:-gpu}"
echo "AIRFLOW_HOME  $AIRFLOW_HOME"
echo "metadata DB   $(redact "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")"
echo "broker        $(redact "$AIRFLOW__CELERY__BROKER_URL")"
echo "queues        $AIRFLOW__OPERATORS__DEFAULT_QUEUE (worker default), $gpu_queue (worker gpu)"
echo "artifacts     $SOLARIS_ARTIFACTS_DIR"

# The metadata database, created when the server has no database of that name yet.
"$ROOT/.venv/bin/python" - "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" <<'PY'
import sys

import psycopg2
from sqlalchemy.engine import make_url

url = make_url(sys.argv[1])
server = dict(host=url.host, port=url.port or 5432, user=url.username, password=url.password)
conn = psycopg2.connect(dbname="postgres", connect_timeout=10, **server)
conn.autocommit = True
with conn.cursor() as cur:
    cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (url.database,))
    if cur.fetchone() is None:
        cur.execute(f'CREATE DATABASE "{url.database}"')
        print(f"created the metadata database {url.database}")
conn.close()
PY
airflow_setup

if [[ "$check" == 1 ]]; then
    echo "check mode: not starting Airflow"
    "$AIRFLOW" dags list
    exit 0
fi

echo "Airflow UI    $airflow_url   (the SOLARIS page: $airflow_url/solaris/)"

# The components run in a process group of their own (airflow_group, scripts/airflow_env.sh),
# each in the background with its output prefixed with its name; any component exiting ends
# the group, as do Ctrl-C and `make airflow-stop`.
export AIRFLOW gpu_queue
status=0
airflow_group bash -c '
run() {
    local name="$1"
    shift
    "$@" > >(sed -u "s/^/[$name] /") 2>&1 &
}
run api-server "$AIRFLOW" api-server
run scheduler "$AIRFLOW" scheduler --skip-serve-logs
run dag-processor "$AIRFLOW" dag-processor
run triggerer "$AIRFLOW" triggerer --skip-serve-logs
run worker "$AIRFLOW" celery worker --skip-serve-logs --without-gossip --without-mingle \
    --queues "$AIRFLOW__OPERATORS__DEFAULT_QUEUE" --celery-hostname "default@%h" \
    --concurrency "${SOLARIS_CELERY_CONCURRENCY:-2}"
run worker-gpu "$AIRFLOW" celery worker --skip-serve-logs --without-gossip --without-mingle \
    --queues "$gpu_queue" --celery-hostname "gpu@%h" --concurrency 1
wait -n
' || status=$?
exit "$status"
