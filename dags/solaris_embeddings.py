"""The FM's last shared layer for the selected pairs, sharded over mapped tasks.

Runs on every ``candidates`` asset event. Each shard of the interval's selection is one
mapped task on the ``gpu`` pool and the ``gpu`` queue: FM → autoencoder → ``z``, written to
the offline history and to Redis through Feast, with ``computed_at`` = the interval's end.
Failed shards retry with exponential back-off; a retry rewrites the same files.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Asset, dag, task

from solaris.orchestration import embeddings, runs

SETTINGS = runs.settings()  # schedules only: no data, Redis or models at parse time
CANDIDATES = Asset(runs.CANDIDATES)
PAIR_EMBEDDINGS = Asset(runs.PAIR_EMBEDDINGS)


@dag(
    schedule=[CANDIDATES],
    start_date=SETTINGS.cycle.start,
    catchup=False,
    max_active_runs=1,  # intervals in order: a later write must not land before an earlier
    tags=["solaris"],
    doc_md=__doc__,
    params=runs.conf_params(),  # a conf of the wrong shape is refused at trigger time
)
def solaris_embeddings():
    @task
    def plan_shards(params=None, triggering_asset_events=None):
        return embeddings.plan(params, triggering_asset_events)

    @task(
        pool=SETTINGS.cycle.gpu_pool,
        queue=SETTINGS.cycle.gpu_queue,
        retries=SETTINGS.cycle.embed_retries,
        retry_delay=timedelta(seconds=SETTINGS.cycle.retry_delay_seconds),
        retry_exponential_backoff=2.0,
    )
    def embed_shard(shard):
        return embeddings.embed(shard)

    # none_failed: an interval with nothing selected maps zero shards (a skip); the event
    # is still published, so enrichment moves on to this interval.
    @task(outlets=[PAIR_EMBEDDINGS], trigger_rule="none_failed")
    def publish(shards, params=None, triggering_asset_events=None, outlet_events=None):
        outlet_events[PAIR_EMBEDDINGS].extra = embeddings.publish(
            params, shards, triggering_asset_events
        )

    publish(embed_shard.expand(shard=plan_shards()))


solaris_embeddings()
