"""The same run gives the same numbers: runs of the report on the tiny fake MovieLens."""

import numpy as np
import pytest

from solaris.config import SolarisConfig
from solaris.examples.movielens.exposure import exposure_features
from solaris.examples.movielens.features import FeatureContext
from solaris.examples.movielens.report.aggregate import summarise
from solaris.examples.movielens.report.claims import claims
from solaris.examples.movielens.report.render import markdown, plots
from solaris.examples.movielens.report.run import bounds, run_windows
from solaris.examples.movielens.report.seed import run_seed
from solaris.examples.movielens.report.settings import ReportSettings
from solaris.examples.movielens.report.shortfalls import shortfalls
from solaris.examples.movielens.requests import build_request_log

SMALL = ReportSettings(
    seeds=(0,),
    windows=2,
    test_share=0.1,
    vm_history=3,
    kd_grid=(0.0, 1.0),
    n_inits=2,
    coverages=(0.2, 0.5, 1.0),
    shares=(0.05, 0.2),
    curve_shares=(0.2,),
    snapshot_minutes=(60.0,),
    ttls_hours=(6.0,),
    cadences_minutes=(15.0,),
    activity_powers=(1.0,),
    n_boot=20,
)
CADENCE = SMALL.base_cadence_seconds


@pytest.fixture
def tiny_setup(tiny_ml, tmp_path):
    cfg = SolarisConfig(
        artifacts_dir=tmp_path / "artifacts",
        requests={"retrieval_k": 10},
        model={"history_len": 5, "z_dim": 4, "shared_dim": 16, "embed_dim": 4, "vm_hidden": 8},
        train={"max_epochs": 1, "ae_epochs": 1, "batch_size": 256},
    )
    log = build_request_log(tiny_ml.ratings, cfg.requests)
    return log, FeatureContext.from_config(tiny_ml, cfg.model), cfg


def test_same_run_gives_the_same_report_numbers(tiny_setup):
    log, ctx, cfg = tiny_setup
    features = exposure_features(log, cadence_seconds=CADENCE)
    a = run_seed(0, 1, log, ctx, cfg, SMALL, features)
    b = run_seed(0, 1, log, ctx, cfg, SMALL, features)
    assert a["table1"] == b["table1"]
    assert a["sweeps"] == b["sweeps"]
    assert a["curve"] == b["curve"]
    for task, losses in a["row_losses"].items():
        for name, loss in losses.items():
            np.testing.assert_array_equal(loss, b["row_losses"][task][name])
    summary = summarise([a], SMALL.n_boot)
    assert set(summary["table1"]) == {"like", "dislike", "neutral"}
    assert summary["transfer_ratio"]["neutral"]["VM+KD"]["ci95"] is not None
    assert "VM+z (100% offline) − VM+FM logits" in summary["transfer_ratio"]["neutral"]
    np.testing.assert_equal(a["selector_auc"], b["selector_auc"])  # NaN on tiny data
    assert a["tier_coverage"] == b["tier_coverage"]


def test_runs_in_two_windows_render_every_section_of_the_report(tiny_setup, tmp_path):
    log, ctx, cfg = tiny_setup
    features = exposure_features(log, cadence_seconds=CADENCE)
    runs = [run_seed(0, w, log, ctx, cfg, SMALL, features) for w in (0, 1)]
    assert runs[0]["split"]["test_end"] == runs[1]["split"]["val_end"]  # consecutive
    assert runs[1]["split"]["test_end"] is None  # the last window ends with the log
    summary = summarise(runs, SMALL.n_boot)
    assert [w["window"] for w in summary["windows"]] == [0, 1]
    summary["bounds"] = bounds(log, cfg, SMALL)
    summary["shortfalls"] = shortfalls(summary)
    summary["claims"] = claims(summary)
    prov = {
        "git_revision": "abc",
        "git_dirty": False,
        "recbole_version": "1.2.1",
        "data_sha256": {},
        "seeds": [0],
        "windows": 2,
        "runtime_s": 1.0,
        "cpus": 2,
        "torch": "x",
        "numpy": "y",
        "fm_versions": summary["fm_versions"],
        "settings_json": SMALL.model_dump_json(),
        "config_json": "{}",
    }
    text = markdown(summary, prov)
    for heading in (
        "## What holds, and what does not",
        "## Windows",
        "## The paper's comparison, row by row",
        "## Headline",
        "## Table 1 analogue",
        "## Transfer ratio",
        "## Selection: the verifier against its baselines",
        "## Table 2 analogue",
        "## Tiers as serving builds them",
        "## Placeholder handling",
        "## Where this falls short",
    ):
        assert heading in text
    assert "rating==3" in text and "placebo: untrained FM" in text
    assert len(plots(summary, tmp_path)) == 4


def test_runs_in_processes_give_the_numbers_of_one_process(tiny_setup):
    log, ctx, cfg = tiny_setup
    features = exposure_features(log, cadence_seconds=CADENCE)
    both = SMALL.model_copy(update={"seeds": (0, 1), "windows": 1, "processes": 2})
    parallel = run_windows(log, ctx, cfg, both, features)
    serial = run_windows(log, ctx, cfg, both.model_copy(update={"processes": 1}), features)
    assert [r["seed"] for r in parallel] == [0, 1]
    for p, s in zip(parallel, serial, strict=True):
        for task, variants in s["table1"].items():
            for name, figures in variants.items():
                # One torch thread per process against two: the same up to float rounding.
                assert p["table1"][task][name]["logloss"] == pytest.approx(
                    figures["logloss"], rel=1e-4
                )
