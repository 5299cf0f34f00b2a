"""Verifier selection, once per refresh interval or when new request-log data lands.

The schedule interval is the refresh cadence (``SOLARIS_SELECTION__CADENCE_MINUTES``): the
pairs selected from one interval's requests are embedded after it ends and are usable from
the next interval on. The run first serves the interval's requests to measure what the VM
got, drains the miss stream, then selects; its record becomes the ``candidates`` asset
event's extra, which tells the embeddings DAG which interval to embed.

Intervals must run in order (each skips what earlier ones cached): backfill with max active
runs 1.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Asset, AssetOrTimeSchedule, DeltaDataIntervalTimetable, dag, task

from solaris.orchestration import tasks

# The schedule is configuration (SOLARIS_* and the SOLARIS_CONFIG YAML); no data, Redis or
# models are touched at parse time.
SETTINGS = tasks.config()
REQUEST_LOG = Asset(tasks.REQUEST_LOG)
CANDIDATES = Asset(tasks.CANDIDATES)


@dag(
    schedule=AssetOrTimeSchedule(
        timetable=DeltaDataIntervalTimetable(timedelta(minutes=SETTINGS.selection.cadence_minutes)),
        assets=[REQUEST_LOG],
    ),
    start_date=datetime.fromisoformat(SETTINGS.cycle.start),
    catchup=False,
    max_active_runs=1,  # each interval's selection skips the pairs earlier ones cached
    tags=["solaris"],
    doc_md=__doc__,
)
def solaris_candidates():
    @task(outlets=[CANDIDATES])
    def select_candidates(
        params=None,
        data_interval_start=None,
        data_interval_end=None,
        triggering_asset_events=None,
        outlet_events=None,
    ):
        outlet_events[CANDIDATES].extra = tasks.select(
            params, data_interval_start, data_interval_end, triggering_asset_events, REQUEST_LOG
        )

    select_candidates()


solaris_candidates()
