"""Coverage beyond the selected pairs, refreshed on every ``pair_embeddings`` event.

User aggregates (24 h code sum and count), item aggregates, the user neighbour table and
the neighbour fill for the candidates the verifier did not select, as of the newest
interval end that triggered the run, partitioned by user (``SOLARIS_CYCLE__PARTITIONS``):

1. ``enrich`` groups the partitions by their codes in the window. A quiet interval is one
   group: the task then does the whole enrichment itself, one partition at a time, and
   emits the views' events, and skips the tasks below at once (one task start per interval).
2. ``partition_aggregates``, one mapped task per group: its users' ``uagg`` rows, its share
   of the item sums and its users' embeddings, reading only its partitions' codes.
3. ``aggregates``: the item sums added up into ``iagg``; the user KNN index built once over
   every partition's users.
4. ``partition_neighbours``, one mapped task per group: its users' neighbours (``unn``) from
   the index, and the neighbour fill of its users' candidates.
5. ``neighbours``: the fill's record and event.

The events go through an asset alias, so that exactly the task that finished a view emits
its event.
"""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias, dag, task

from solaris.orchestration import enrichment, runs

SETTINGS = runs.settings()  # schedules only: no data, Redis or models at parse time
PAIR_EMBEDDINGS = Asset(runs.PAIR_EMBEDDINGS)
# uagg, iagg and nbr events, emitted by whichever task finished each view.
VIEW_EVENTS = AssetAlias("solaris_enrichment_events")


@dag(
    schedule=[PAIR_EMBEDDINGS],
    start_date=SETTINGS.cycle.start,
    catchup=False,
    max_active_runs=1,  # intervals in order: a later write must not land before an earlier
    tags=["solaris"],
    doc_md=__doc__,
    params=runs.conf_params(),  # a conf of the wrong shape is refused at trigger time
)
def solaris_enrichment():
    @task(outlets=[VIEW_EVENTS])
    def enrich(params=None, triggering_asset_events=None, outlet_events=None):
        return enrichment.enrich(params, triggering_asset_events, outlet_events[VIEW_EVENTS])

    @task
    def partition_aggregates(group):
        return enrichment.partition_aggregates(group)

    # Skipped after a quiet interval: enrich did the work and skipped the rest of the run.
    @task(outlets=[VIEW_EVENTS])
    def aggregates(results, params=None, triggering_asset_events=None, outlet_events=None):
        return enrichment.aggregates(
            params, results, triggering_asset_events, outlet_events[VIEW_EVENTS]
        )

    @task
    def partition_neighbours(group):
        return enrichment.partition_neighbours(group)

    @task(outlets=[VIEW_EVENTS])
    def neighbours(results, params=None, triggering_asset_events=None, outlet_events=None):
        enrichment.neighbours(params, results, triggering_asset_events, outlet_events[VIEW_EVENTS])

    units = aggregates(partition_aggregates.expand(group=enrich()))
    neighbours(partition_neighbours.expand(group=units))


solaris_enrichment()
