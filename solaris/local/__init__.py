"""Running the cycle's DAGs in this process with ``dag.test()``: the demo and the DAG tests.

Not production code: a deployment runs the same DAG files under Airflow's scheduler.
"""
