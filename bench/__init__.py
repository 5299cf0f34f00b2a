"""Side-by-side benchmarks of SOLARIS (not shipped, not run by pytest).

``python -m bench.feature_store``: serving fetch, online writes, Redis bytes, profile.
``python -m bench.offline_join``: point-in-time join of ``get_historical_features``.
``python -m bench.training_set``: one ``build_training_set`` call against ``solaris training-set``.
``python -m bench.cluster_drill``: a Redis Cluster master killed while serving.
``python -m bench.scale``: cost growth of one interval of the cycle, 10^5 to 10^7 candidates.
``python -m bench.scheduler``: one interval under the real Airflow scheduler against ``dag.test()``.
"""
