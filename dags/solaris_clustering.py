"""User clustering, daily (``SOLARIS_CYCLE__CLUSTERING_CRON``) or on demand.

Rebuilds the user embeddings from the codes of the neighbour window and their cosine KNN
table (``unn``); the enrichment DAG's neighbour fill reads the newest table. In a replay
namespace it first waits for the enrichment as of its time, and the candidates runs after
it wait for it, so a backfill builds the same tables as an in-order run.
"""

from __future__ import annotations

from airflow.sdk import Asset, dag, task

from solaris.orchestration import clustering, runs

SETTINGS = runs.settings()  # schedules only: no data, Redis or models at parse time
USER_NEIGHBOURS = Asset(runs.USER_NEIGHBOURS)


@dag(
    schedule=SETTINGS.cycle.clustering_cron,
    start_date=SETTINGS.cycle.start,
    catchup=False,
    tags=["solaris"],
    doc_md=__doc__,
    params=runs.conf_params(),  # a conf of the wrong shape is refused at trigger time
)
def solaris_clustering():
    # A replay's clustering run may wait for a whole replayed day: it frees its worker slot
    # between pokes and waits up to a day (or cycle.wait_previous_minutes, if longer).
    @task.sensor(
        poke_interval=15,
        timeout=max(SETTINGS.cycle.wait_previous_seconds, 86_400),
        mode="reschedule",
    )
    def enrichment_published(params=None, data_interval_start=None, data_interval_end=None):
        return clustering.enrichment_published(params, data_interval_start, data_interval_end)

    @task(outlets=[USER_NEIGHBOURS])
    def cluster_users(
        params=None, data_interval_start=None, data_interval_end=None, outlet_events=None
    ):
        outlet_events[USER_NEIGHBOURS].extra = clustering.cluster_users(
            params, data_interval_start, data_interval_end
        )

    enrichment_published() >> cluster_users()


solaris_clustering()
