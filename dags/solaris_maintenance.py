"""Maintenance, daily (``SOLARIS_CYCLE__MAINTENANCE_CRON``) or on demand.

Removes what is past ``cycle.retention_days`` as of the run's time (its interval end, never
the wall clock): the namespace's per-interval cycle state and run records (`prune_state`;
the verifier in force, the newest neighbour table and the live marker are kept), Feast's
offline rows by whole days (`prune_offline`), and Airflow's own metadata (`clean_airflow_db`,
`airflow db clean`). Each task writes a run record with what it removed and kept. A conf
naming a namespace and an interval prunes that namespace as of that interval's end.
"""

from __future__ import annotations

from airflow.sdk import dag, task

from solaris.orchestration import maintenance, runs

SETTINGS = runs.settings()  # schedules only: no data, Redis or models at parse time


@dag(
    schedule=SETTINGS.cycle.maintenance_cron,
    start_date=SETTINGS.cycle.start,
    catchup=False,
    max_active_runs=1,  # two cleanups of one metadata DB would only contend
    tags=["solaris"],
    doc_md=__doc__,
    params=runs.conf_params(),  # a conf of the wrong shape is refused at trigger time
)
def solaris_maintenance():
    # Three independent tasks: a failure of one (the metadata DB unreachable) leaves the
    # others to do their part.
    @task
    def prune_state(params=None, data_interval_start=None, data_interval_end=None):
        return maintenance.prune_state_task(params, data_interval_start, data_interval_end)

    @task
    def prune_offline(params=None, data_interval_start=None, data_interval_end=None):
        return maintenance.prune_offline_task(params, data_interval_start, data_interval_end)

    @task
    def clean_airflow_db(params=None, data_interval_start=None, data_interval_end=None):
        return maintenance.clean_airflow_db_task(params, data_interval_start, data_interval_end)

    prune_state()
    prune_offline()
    clean_airflow_db()


solaris_maintenance()
