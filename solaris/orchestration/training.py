"""The training DAG: retrain the VM behind the verifier, daily.

Task entry point: :func:`retrain_verifier`. The work is the configured trainer's
(``model.trainer``, a :class:`~solaris.adapters.VerifierTrainer`; the MovieLens example's
retrains the VM on point-in-time SOLARIS features and publishes it only when no worse).
Without a trainer the run records that it kept the verifier.
"""

from __future__ import annotations

import time
from typing import Any

from solaris import adapters
from solaris.orchestration.layout import INTERVAL_END, write_run_record
from solaris.orchestration.runs import Params, task_run

__all__ = ["DAG_ID", "retrain_verifier"]

DAG_ID = "solaris_training"


def retrain_verifier(params: Params, start: object, end: object) -> dict[str, Any]:
    """Retrain as of the run's interval end; the record is the ``verifier`` event's extra."""
    began = time.perf_counter()
    run = task_run(params, start, end)
    trainer = adapters.verifier_trainer(run.cfg)
    if trainer is None:
        record: dict[str, Any] = {
            "published": False,
            "reason": "no model.trainer configured: the verifier is kept",
        }
    else:
        record = dict(trainer.retrain(run.cfg, run.as_of))
    record = {INTERVAL_END: run.as_of, **record}
    record["seconds"] = round(time.perf_counter() - began, 3)
    write_run_record(run.layout, DAG_ID, f"{run.as_of:011d}", record)
    return run.extra(record)
