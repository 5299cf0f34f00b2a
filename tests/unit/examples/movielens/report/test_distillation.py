import numpy as np
import pytest

from solaris.config import SolarisConfig
from solaris.examples.movielens.features import FeatureContext
from solaris.examples.movielens.models.training import TimeSplit, predict_proba, predict_vm
from solaris.examples.movielens.report.aggregate import kd_choices, pool_distillation
from solaris.examples.movielens.requests import build_request_log
from solaris.examples.movielens.train import Distillation, train_vm, vm_examples


@pytest.fixture
def vm_rows(tiny_ml):
    cfg = SolarisConfig(
        requests={"retrieval_k": 5},
        model={"history_len": 5, "embed_dim": 4, "vm_hidden": 8},
        train={"max_epochs": 1, "batch_size": 64},
    )
    imp = build_request_log(tiny_ml.ratings, cfg.requests).impressions
    split = TimeSplit.from_shares(imp["ts"].to_numpy(), 0.8, 0.1)
    ts = imp["ts"].to_numpy()
    ctx = FeatureContext.from_config(tiny_ml, cfg.model)
    return ctx, imp[split.part(ts, "train")], imp[split.part(ts, "val")], cfg


def test_auxiliary_distillation_adds_one_head_per_teacher_task(vm_rows):
    ctx, train, val, cfg = vm_rows
    teacher = np.full((len(train), 2), 0.5, dtype=np.float32)
    vm, init = train_vm(
        ctx, train, val, cfg, task="dislike", distill=Distillation(teacher, 1.0, "auxiliary")
    )
    assert init["n_tasks"] == 3
    assert vm.head.out_features == 3


def test_task_distillation_needs_one_probability_per_row(vm_rows):
    ctx, train, val, cfg = vm_rows
    with pytest.raises(ValueError, match="one teacher probability"):
        train_vm(ctx, train, val, cfg, distill=Distillation(np.zeros((len(train), 2)), 1.0))


def test_task_distillation_pulls_the_vm_towards_the_teacher(vm_rows):
    # λ large: the blended target (y + λp) / (1 + λ) is ~p, so a constant teacher of 0.9
    # pulls the VM's predictions above those of the VM trained on the labels alone.
    ctx, train, val, cfg = vm_rows
    teacher = np.full(len(train), 0.9, dtype=np.float32)
    ex = vm_examples(ctx, train, "like")
    plain, _ = train_vm(ctx, train, val, cfg)
    kd, _ = train_vm(ctx, train, val, cfg, distill=Distillation(teacher, 1e6))
    p_plain = predict_proba(plain, ex, predict_vm)[:, 0]
    p_kd = predict_proba(kd, ex, predict_vm)[:, 0]
    assert p_kd.mean() > p_plain.mean() + 0.03


def test_infinite_weight_trains_on_soft_labels_alone_and_only_for_the_task_head(vm_rows):
    ctx, train, val, cfg = vm_rows
    teacher = np.full(len(train), 0.9, dtype=np.float32)
    vm, _ = train_vm(ctx, train, val, cfg, distill=Distillation(teacher, float("inf")))
    assert vm.head.out_features == 1
    with pytest.raises(ValueError, match="finite weight"):
        train_vm(
            ctx,
            train,
            val,
            cfg,
            task="dislike",
            distill=Distillation(teacher[:, None], float("inf"), "auxiliary"),
        )


# --- the weight chosen over all seeds ---------------------------------------------------


def _seed(val: dict[str, float], chosen: float, window: int = 0) -> dict:
    weights = list(val)
    return {
        "window": window,
        "kd": {"like": {"val_logloss": val, "chosen": chosen, "at_edge": False, "n_inits": 5}},
        "kd_scores": {"like": {w: {"logloss": float(w)} for w in weights}},
        "table1": {"like": {"VM": {"logloss": 1.0}, "VM+KD": {"logloss": chosen}}},
        "row_losses": {"like": {"VM+KD": np.full(3, chosen)}},
        "kd_row_losses": {"like": {w: np.full(3, float(w)) for w in weights}},
    }


def test_one_distillation_weight_is_chosen_over_a_windows_runs_on_validation():
    # Seed a alone prefers 10, seed b alone 100; on the mean 100 wins (0.50 < 0.51).
    a = _seed({"0.0": 0.60, "10.0": 0.50, "100.0": 0.51}, chosen=10.0)
    b = _seed({"0.0": 0.60, "10.0": 0.52, "100.0": 0.49}, chosen=100.0)
    pooled = pool_distillation([a, b])
    for s in pooled:
        assert s["kd"]["like"]["chosen"] == 100.0
        assert s["table1"]["like"]["VM+KD"] == {"logloss": 100.0}
        np.testing.assert_array_equal(s["row_losses"]["like"]["VM+KD"], np.full(3, 100.0))
        assert s["kd"]["like"]["at_edge"]  # the largest weight of the grid won
    choices = kd_choices(pooled)["like"]
    assert choices["by_window"][0]["per_seed_choice"] == [10.0, 100.0]
    assert choices["n_runs"] == 2
    # Pure and idempotent: the inputs keep their own choice; pooling again changes nothing.
    assert a["table1"]["like"]["VM+KD"] == {"logloss": 10.0} and a["kd"]["like"]["chosen"] == 10.0
    again = pool_distillation(pooled)
    assert kd_choices(again)["like"] == choices


def test_each_window_chooses_its_weight_on_its_own_validation_period_only():
    # The next window's validation period is this window's test period: a weight pooled
    # over windows would be chosen partly on test. Window 0 prefers 10, window 1 prefers 100
    # (and would outvote window 0 on a pooled mean).
    w0 = _seed({"0.0": 0.60, "10.0": 0.50, "100.0": 0.51}, chosen=10.0, window=0)
    w1 = _seed({"0.0": 0.60, "10.0": 0.70, "100.0": 0.30}, chosen=100.0, window=1)
    pooled = pool_distillation([w0, w1])
    assert [s["kd"]["like"]["chosen"] for s in pooled] == [10.0, 100.0]
    assert [w["chosen"] for w in kd_choices(pooled)["like"]["by_window"]] == [10.0, 100.0]
