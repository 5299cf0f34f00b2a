"""What the SOLARIS page of the Airflow UI shows, as pure functions (no Airflow, nothing heavy).

``plugins/solaris_plugin.py`` is the wiring (the Airflow plugin, its routes, the auth manager);
it calls, per request:

* :mod:`solaris.dashboard.filters`: the query parameters, parsed (times by
  :func:`solaris.times.epoch_of`);
* :mod:`solaris.dashboard.records`: the run records read, dated, grouped by namespace and
  filtered;
* :mod:`solaris.dashboard.page`: the HTML page, made of :mod:`~solaris.dashboard.plots`
  (drawn by :mod:`~solaris.dashboard.charts`) and :mod:`~solaris.dashboard.tables` (figures
  by :mod:`~solaris.dashboard.formatting`).
"""
