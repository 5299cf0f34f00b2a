"""The SOLARIS cycle as Airflow task bodies: one function per task. No module imports
Airflow when it is imported (a task imports what it hands back to Airflow, such as a
sensor's ``PokeReturnValue``, inside the function), apart from
:mod:`~solaris.orchestration.warm`: the executors Airflow loads, which subclass its own.

Each module is one DAG's work (``candidates``, ``embeddings``, ``enrichment``,
``training``); :mod:`~solaris.orchestration.layout` says where the cycle keeps its state and
:mod:`~solaris.orchestration.resources` loads what the tasks need. The DAG files in
``dags/`` only wire these functions, so everything here runs (and is tested) without a
scheduler, and every task takes its "now" from the run's data interval.
"""
