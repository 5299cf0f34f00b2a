"""Side-by-side benchmarks of the SOLARIS feature store (not shipped, not run by pytest).

``python -m bench.feature_store``: serving fetch, online writes, Redis bytes, profile.
``python -m bench.offline_join``: point-in-time join of ``get_historical_features``.
"""
