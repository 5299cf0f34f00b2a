# The two commands of the README contract: `make demo` and `make test`.
# Each creates .venv and installs the pinned lock (constraints.txt) when it is missing or
# out of date, and fetches MovieLens-100K into the cache when it is not there yet.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint format docs data venv clean bench bench-scale bench-steady bench-scheduler \
	feast-plan feast-apply report airflow airflow-celery airflow-stop

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==25.3"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,report]"
	@touch $(STAMP)

venv: $(STAMP)

data: $(STAMP)
	$(BIN)/solaris data fetch

demo: data
	$(BIN)/solaris demo

report: data
	$(BIN)/solaris report

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/typecheck.py
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/typecheck.py

format: $(STAMP)
	$(BIN)/ruff format .

# The configuration reference, generated from the settings' descriptions (a test checks it).
docs: $(STAMP)
	$(BIN)/python -m solaris.config_reference

# Everything this repository's commands created, so that the next `make demo` starts as on a
# fresh clone: the demo namespace's Redis keys and streams (other namespaces are left alone:
# `solaris namespace reset NAME`), a running `make airflow` (stopped), Airflow's home, the
# feature repo's registry and offline rows, the artifacts, the venv and the caches.
# Airflow stops first, so that no task of it writes demo keys after the reset. A reset that
# fails (no Redis answering: a demo on the embedded Redis left nothing there) is shown and
# the rest goes on.
clean:
	-@bash scripts/airflow_stop.sh
	-@test -x $(BIN)/solaris && $(BIN)/solaris namespace reset demo
	rm -rf $(VENV) artifacts .airflow feature_repo/data .pytest_cache .ruff_cache

# Benchmarks: ratios measured side by side in one run (not part of the tests).
bench: $(STAMP)
	$(BIN)/python -m bench.feature_store
	$(BIN)/python -m bench.serving_http
	$(BIN)/python -m bench.offline_join
	$(BIN)/python -m bench.nearline

# How one interval's cost grows with its traffic, 10^5 to 10^7 candidates, each task of the
# partitioned cycle in a process of its own (about 16 minutes).
bench-scale: $(STAMP)
	$(BIN)/python -m bench.scale

# The cycle's steady state against its first interval: 3.2 days of synthetic traffic
# through the DAGs (dag.test), the production windows, the same rows every interval (about
# 22 minutes); rewrites the table in docs/scaling.md.
bench-steady: $(STAMP)
	$(BIN)/python -m bench.steady

# One interval under the real scheduler against dag.test(), on MovieLens (after `make demo`).
bench-scheduler: $(STAMP)
	$(BIN)/python -m bench.scheduler

# The Feast CLI on the repo (the store reads SOLARIS_STORE__REDIS from the environment). The
# default is set for these two targets only: `make demo` must see "no Redis configured".
feast-plan feast-apply: export SOLARIS_STORE__REDIS ?= localhost:6379
feast-plan feast-apply: export SOLARIS_NAMESPACE ?= live
feast-plan: $(STAMP)
	$(BIN)/feast -c feature_repo plan
feast-apply: $(STAMP)
	$(BIN)/feast -c feature_repo apply

# Airflow standalone (api-server, scheduler, dag-processor, triggerer) on dags/ and plugins/,
# state in .airflow/ (SQLite; SOLARIS_AIRFLOW_DB_URL=postgresql+psycopg2://... for PostgreSQL).
# The UI is http://localhost:8080, the SOLARIS page http://localhost:8080/solaris/.
airflow: $(STAMP)
	bash scripts/airflow_standalone.sh

# The same with CeleryExecutor: PostgreSQL metadata DB, the local RabbitMQ as broker and two
# workers, `default` and `gpu` (the queue embed_shard is routed to).
airflow-celery: $(STAMP)
	bash scripts/airflow_celery.sh

# Stop the running `make airflow` or `make airflow-celery`, every process of it (Ctrl-C in
# its terminal does the same).
airflow-stop:
	bash scripts/airflow_stop.sh
