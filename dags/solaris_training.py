"""Daily VM retraining (``SOLARIS_CYCLE__TRAINING_CRON``).

Builds the training set with Feast's ``get_historical_features`` (point-in-time, so no
feature from after an impression leaks into it), retrains the VM with tier dropout, and
publishes it as the candidates DAG's verifier only when its validation log-loss is no worse
than the current verifier's on the same rows.
"""

from __future__ import annotations

from airflow.sdk import Asset, dag, task

from solaris.orchestration import runs, training

SETTINGS = runs.settings()  # schedules only: no data, Redis or models at parse time
VERIFIER = Asset(runs.VERIFIER)


@dag(
    schedule=SETTINGS.cycle.training_cron,
    start_date=SETTINGS.cycle.start,
    catchup=False,
    tags=["solaris"],
    doc_md=__doc__,
    params=runs.conf_params(),  # a conf of the wrong shape is refused at trigger time
)
def solaris_training():
    @task(outlets=[VERIFIER])
    def retrain_verifier(
        params=None, data_interval_start=None, data_interval_end=None, outlet_events=None
    ):
        outlet_events[VERIFIER].extra = training.retrain_verifier(
            params, data_interval_start, data_interval_end
        )

    retrain_verifier()


solaris_training()
