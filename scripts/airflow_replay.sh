#!/usr/bin/env bash
# Replay history through the running `make airflow`: backfills of solaris_candidates and
# solaris_clustering in a namespace of its own (the embeddings and enrichment runs follow
# from the asset events).
#
#   scripts/airflow_replay.sh NAMESPACE FROM TO
#
# FROM and TO are the first and last interval starts, ISO 8601 with a zone (inclusive), e.g.
#   scripts/airflow_replay.sh replay 1998-03-30T22:00:00+00:00 1998-03-31T21:00:00+00:00
# The intervals are those of the candidates DAG's schedule (selection.cadence_minutes of the
# running Airflow; `make demo` prints the command for its own window and cadence). The
# namespace's earlier state (Redis keys, streams, cycle and offline files) is deleted first,
# so the replay starts cold like the demo; the live namespace and others are not touched.
# The namespace is pinned to the newest model version (or $SOLARIS_MODEL_VERSION).
# The backfill runs one interval at a time, in order (max active runs 1), and each
# candidates run waits for the previous interval's embeddings and enrichment. Interrupted,
# it can be run again: the earlier replay's backfills are cancelled first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
    usage
    exit 0
fi
if [[ $# -ne 3 ]]; then
    usage >&2
    exit 2
fi
namespace="$1" from="$2" to="$3"

AIRFLOW="${SOLARIS_AIRFLOW_BIN:-$ROOT/.venv/bin/airflow}"
if [[ ! -x "$AIRFLOW" ]]; then
    echo "airflow_replay.sh: no Airflow at $AIRFLOW; run 'make venv' first" >&2
    exit 1
fi
source "$ROOT/scripts/airflow_env.sh"
if [[ "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" == sqlite* ]]; then
    echo "airflow_replay.sh: the metadata DB is SQLite, which the running scheduler and a" \
        "backfill lock each other out of; start make airflow and this script with" \
        "SOLARIS_AIRFLOW_DB_URL=postgresql+psycopg2://user@host:5432/db (see docs/airflow.md)" >&2
    exit 1
fi

# An earlier, interrupted replay of this namespace: its backfills are cancelled and their runs
# waited for before the reset (another namespace's active backfill stops the script here,
# before anything is deleted), so the script can simply be run again.
"$ROOT/.venv/bin/python" -m solaris.local.backfills "$namespace"
"$ROOT/.venv/bin/solaris" namespace reset "$namespace"
# The replay reads the models pinned for its namespace: SOLARIS_MODEL_VERSION, by default the
# newest version (after `make demo`, the demo's; `solaris models list` shows them all).
"$ROOT/.venv/bin/solaris" models promote --namespace "$namespace" "${SOLARIS_MODEL_VERSION:-newest}"
conf="{\"namespace\": \"$namespace\", \"replay\": true}"
# The daily clustering of the range first: its runs wait for the enrichment as of their time,
# and the candidates run after each waits for it (a replay's sensors), so the two backfills
# interleave exactly as an in-order run.
for dag in solaris_clustering solaris_candidates; do
    "$AIRFLOW" backfill create --dag-id "$dag" --from-date "$from" --to-date "$to" \
        --max-active-runs 1 --reprocess-behavior completed --dag-run-conf "$conf"
done
echo "backfills of solaris_clustering and solaris_candidates created in namespace" \
    "$namespace; follow them in the UI (Browse > Backfills) or on the SOLARIS page"
