"""The SOLARIS cycle as Airflow task bodies: one function per task, no Airflow imports.

Each module is one DAG's work (``candidates``, ``embeddings``, ``enrichment``,
``training``); :mod:`~solaris.orchestration.layout` says where the cycle keeps its state and
:mod:`~solaris.orchestration.resources` loads what the tasks need. The DAG files in
``dags/`` only wire these functions, so everything here runs (and is tested) without a
scheduler, and every task takes its "now" from the run's data interval.
"""
