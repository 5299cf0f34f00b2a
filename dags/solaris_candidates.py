"""Verifier selection, once per refresh interval.

The schedule interval is the refresh cadence (``SOLARIS_SELECTION__CADENCE_MINUTES``): the
pairs selected from one interval's requests are embedded after it ends and are usable from
the next interval on. A run works in one namespace (``SOLARIS_NAMESPACE``, default ``live``;
a run's conf may name another, e.g. a replay of history) and on one interval (its data
interval, or the ``interval_start``/``interval_end`` of its conf, on the cadence grid).

1. ``select_candidates``, a sensor: it waits until the previous interval's embeddings and
   enrichment of the namespace are published
   (:func:`~solaris.orchestration.candidates.previous_published`, poked every 5 s), so
   intervals (a backfill too) run strictly in order; then (in a replay namespace, first
   serving the interval's requests from the traffic source through the serving client,
   which logs them) it drains the miss stream and groups the partitions
   (``SOLARIS_CYCLE__PARTITIONS``) by the requests their streams hold. A quiet interval
   is one group: the sensor selects it itself, emits the events and skips the tasks below
   at once (one task start per interval).
2. ``select_partitions``, one mapped task per group otherwise: it drains its partitions'
   request streams into their tables and selects the top share of each request by the
   logged verifier score, against its partitions' own ledgers.
3. ``publish``, after mapped tasks: the interval's record, and the ``request_log`` (the
   drained interval) and ``candidates`` (the selection) events, whose extras tell the
   embeddings DAG what to embed. The events go through an asset alias, so that exactly the
   task that finished the selection emits them (the embeddings DAG starts on them).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import AssetAlias, DeltaDataIntervalTimetable, dag, task

from solaris.orchestration import candidates, runs

SETTINGS = runs.settings()  # schedules only: no data, Redis or models at parse time
# request_log and candidates events, emitted by whichever task finished the selection.
SELECTION_EVENTS = AssetAlias("solaris_selection_events")


@dag(
    schedule=DeltaDataIntervalTimetable(timedelta(minutes=SETTINGS.selection.cadence_minutes)),
    start_date=SETTINGS.cycle.start,
    catchup=False,
    max_active_runs=1,  # each interval's selection skips the pairs earlier ones cached
    tags=["solaris"],
    doc_md=__doc__,
    params=runs.conf_params(),  # a conf of the wrong shape is refused at trigger time
)
def solaris_candidates():
    @task.sensor(
        poke_interval=5,
        timeout=SETTINGS.cycle.wait_previous_seconds,
        mode="poke",
        outlets=[SELECTION_EVENTS],
    )
    def select_candidates(
        params=None, data_interval_start=None, data_interval_end=None, outlet_events=None
    ):
        return candidates.select_when_published(
            params, data_interval_start, data_interval_end, outlet_events[SELECTION_EVENTS]
        )

    @task
    def select_partitions(unit):
        return candidates.select_group(unit)

    # Skipped after a quiet interval: the sensor did the work, emitted the events and
    # skipped the rest of the run.
    @task(outlets=[SELECTION_EVENTS])
    def publish(
        results,
        params=None,
        data_interval_start=None,
        data_interval_end=None,
        outlet_events=None,
    ):
        candidates.publish(
            params, data_interval_start, data_interval_end, results, outlet_events[SELECTION_EVENTS]
        )

    publish(select_partitions.expand(unit=select_candidates()))


solaris_candidates()
