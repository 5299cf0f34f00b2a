"""SOLARIS on a user's own FM and traffic: the synthetic example through the DAGs.

The example (``solaris.examples.synthetic``) has its own log, features and a differently
shaped FM (``h`` of width 24), and no MovieLens code. It is wired only through the adapter
settings; SOLARIS trains the autoencoder on its ``h``, then the five DAGs replay a window of
its traffic with ``dag.test()``: requests served and logged, selection from the logged
scores, FM embeddings written to Feast and Redis, aggregates, and served features.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from solaris.config import SolarisConfig
from solaris.connection import redis_client
from solaris.namespace import Namespace
from solaris.store.feast_store import delete_project_keys

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
REDIS = "127.0.0.1:6379,db=10"  # this module's own database number
DAY = 86_400


@pytest.fixture(scope="module")
def synthetic_cycle(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SolarisConfig, dict]]:
    import shutil

    from solaris.examples.synthetic import SyntheticWorld, prepare
    from solaris.local.demo import run_airflow_stage
    from solaris.model_versions import pin_version
    from solaris.pipeline.codes import fit_autoencoder_from_traffic

    tmp = tmp_path_factory.mktemp("synthetic")
    repo = tmp / "feature_repo"
    shutil.copytree(REPO / "feature_repo", repo, ignore=shutil.ignore_patterns("data"))
    cfg = SolarisConfig(
        namespace=f"syn_{uuid.uuid4().hex[:8]}",
        artifacts_dir=tmp / "artifacts",
        model={
            "foundation": "solaris.examples.synthetic:foundation_model",
            "trainer": None,
            "z_dim": 8,
        },
        requests={"source": "solaris.examples.synthetic:traffic"},
        store={"redis": REDIS, "repo_path": repo},
        selection={"cadence_minutes": 360, "ttl_hours": 24, "share": 0.3},
        train={"ae_epochs": 3},
        cycle={
            "dags_folder": REPO / "dags",
            "airflow_home": os.environ["AIRFLOW_HOME"],  # the session's (tests/conftest.py)
            "demo_days": 1.5,
            "demo_cadence_minutes": 360,
        },
    )
    prepare(cfg)
    start = SyntheticWorld().spec.start_ts
    manifest, _, version = fit_autoencoder_from_traffic(cfg, start, start + DAY)
    pin_version(Namespace.of(cfg).models_root, cfg.namespace, version, live=None)
    printed: list[str] = []
    summary = run_airflow_stage(
        cfg,
        eval_from=start + DAY,
        fm_version=manifest.fm_version,
        echo=printed.append,
        config_file=tmp / "synthetic.yaml",  # as `solaris cycle -c` passes its file
    )
    summary["printed"] = "\n".join(printed)
    summary["fm_version"] = manifest.fm_version
    yield cfg, summary
    delete_project_keys(redis_client(REDIS), cfg.namespace)


def test_the_autoencoder_is_trained_on_the_users_fm_and_versioned_with_it(
    synthetic_cycle,
) -> None:
    from solaris.examples.synthetic import foundation_model
    from solaris.pipeline.codes import read_manifest

    cfg, summary = synthetic_cycle
    manifest = read_manifest(Namespace.of(cfg).models_dir)
    assert manifest.fm == foundation_model(cfg).version
    assert (manifest.shared_dim, manifest.z_dim) == (24, 8)
    assert summary["fm_version"] == manifest.fm_version


def test_the_dags_select_from_logged_requests_and_match_the_library_replay(
    synthetic_cycle,
) -> None:
    _, summary = synthetic_cycle
    assert summary["requests"] > 0 and summary["selected"] > 0
    assert summary["labelled_impressions"] == summary["library_replay_impressions"] > 0
    assert summary["coverage"]["pair"] > 0
    assert summary["coverage"]["pair"] == pytest.approx(
        summary["library_replay_pair_coverage"], abs=1e-12
    )
    assert (
        "training run: kept the current verifier: no model.trainer configured"
        in (summary["printed"])
    )


def test_the_newest_codes_of_the_synthetic_fm_are_served(synthetic_cycle) -> None:
    from solaris.data.schemas import read_table
    from solaris.orchestration.layout import CycleLayout, Interval
    from solaris.serving.client import SolarisFeatures

    cfg, summary = synthetic_cycle
    layout = CycleLayout(Namespace.of(cfg))
    served = None
    for r in reversed(summary["candidates_intervals"]):
        folder = layout.codes_dir(Interval(r["interval_start"], r["interval_end"]))
        if folder is not None and any(folder.glob("shard-*.parquet")):
            table = read_table(folder, "pair_embeddings", z_dim=8)
            users = table["user_id"].to_numpy()
            items = table["item_id"].to_numpy()[users == users[0]]
            with SolarisFeatures(cfg, redis=REDIS, fm_version=summary["fm_version"]) as client:
                served = client.fetch(int(users[0]), items, now=r["interval_end"])
            break
    assert served is not None and served.mask[:, 0].all()
    assert summary["example"]["tiers"]  # the demo's served request got features


def test_the_printed_airflow_command_names_the_settings_of_the_replayed_window(
    synthetic_cycle,
) -> None:
    """Without them, `make airflow` would load the MovieLens example's settings."""
    cfg, summary = synthetic_cycle
    config = (Path(cfg.artifacts_dir).parent / "synthetic.yaml").resolve()
    assert (
        f"SOLARIS_CONFIG={config} SOLARIS_SELECTION__CADENCE_MINUTES=360 make airflow"
        in (summary["printed"])
    )
