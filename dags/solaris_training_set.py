"""A point-in-time training set, on demand (no schedule): ``solaris training-set`` as a task.

Trigger it with a conf naming the impressions and where to write, e.g.
``airflow dags trigger solaris_training_set --conf '{"impressions": "s3://b/imp/",
"out": "s3://b/train/2026-12/"}'`` (also ``namespace``, ``fm_version``, ``chunk_rows``,
``overwrite``). For each impression it writes the features serving would have returned at
its time, with presence masks, as parquet partitioned by day (docs/training_set.md).
"""

from __future__ import annotations

from airflow.sdk import dag, task

from solaris.orchestration import runs, training_set

SETTINGS = runs.settings()  # the start date only: no data, Redis or models at parse time


@dag(
    schedule=None,  # manual: an operator (or another system) triggers it with a conf
    start_date=SETTINGS.cycle.start,
    catchup=False,
    tags=["solaris"],
    doc_md=__doc__,
    params=training_set.conf_params(),  # a conf of the wrong shape is refused at trigger time
)
def solaris_training_set():
    @task
    def write_training_set(params=None):
        return training_set.write_task(params)

    write_training_set()


solaris_training_set()
