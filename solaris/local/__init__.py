"""Running the cycle on one machine: a supported part of SOLARIS, for replays, development
and the tests, beside the Airflow deployment that runs the same DAG files in production.

- :mod:`solaris.local.airflow`: the five DAGs in this process through ``dag.test()``, with
  asset events handed on as the scheduler would (``solaris cycle``, ``make demo``, the DAG
  tests).
- :mod:`solaris.local.cycle` and :mod:`solaris.local.demo`: a window of the request log
  replayed as DAG runs, interval by interval, then one request served from what they wrote
  (``solaris cycle`` on any adapters' traffic; the MovieLens example's last stage).
- :mod:`solaris.local.scheduler`: ``make airflow`` / ``make airflow-celery`` started as one
  process group, intervals triggered and their runs timed from the metadata DB, every
  process stopped at the end (``bench.scheduler``, the Celery integration test).
- :mod:`solaris.local.backfills`: an earlier replay's backfills stopped before a replay of
  the same namespace starts over (``scripts/airflow_replay.sh``).

Nothing here is imported by the DAG files, the serving path or the pipeline stages: a
deployment needs none of it, and it imports no example. docs/airflow.md describes the
commands.
"""
