"""Tests for ``solaris.models.training`` and the settings it is driven by."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pydantic
import pytest
import torch

from solaris.config import SolarisConfig, TrainConfig
from solaris.errors import ConfigError
from solaris.examples.movielens.features import FeatureContext
from solaris.examples.movielens.models.training import (
    Examples,
    TimeSplit,
    _mean_loss,
    fit,
    predict_vm,
    task_targets,
)
from solaris.examples.movielens.models.vm import VerticalModel
from solaris.models.checkpoints import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    checkpoint_meta_path,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
    weights_digest,
)
from solaris.models.device import seed_everything

TASKS = ("like", "love")
VM_SIZES = {"n_tiers": 0, "embed_dim": 4, "hidden": 8, "n_tasks": len(TASKS)}


# --- TimeSplit ---------------------------------------------------------------------------


@pytest.mark.parametrize(("train_share", "val_share"), [(0.8, 0.1), (0.5, 0.3), (0.6, 0.39)])
def test_time_split_parts_are_disjoint_cover_and_ordered(tiny_ml, train_share, val_share):
    ts = tiny_ml.ratings["ts"].to_numpy()[::-1].copy()  # any order
    split = TimeSplit.from_shares(ts, train_share, val_share)
    parts = {name: split.part(ts, name) for name in ("train", "val", "test")}
    stacked = np.stack(list(parts.values()))
    assert (stacked.sum(axis=0) == 1).all()  # disjoint and covering
    train, val, test = (ts[parts[n]] for n in ("train", "val", "test"))
    assert len(train) and len(val) and len(test)
    assert train.max() < val.min() and val.max() < test.min()
    assert split.train_end <= split.val_end
    n = len(ts)
    _, ties = np.unique(ts, return_counts=True)
    assert int(n * train_share) - ties.max() < len(train) <= int(n * train_share)


def test_time_split_by_hand():
    ts = np.array([5, 1, 3, 2, 4, 9, 7, 8, 6, 10])
    split = TimeSplit.from_shares(ts, 0.6, 0.2)
    assert (split.train_end, split.val_end) == (7, 9)
    assert ts[split.part(ts, "train")].tolist() == [5, 1, 3, 2, 4, 6]
    assert sorted(ts[split.part(ts, "val")].tolist()) == [7, 8]
    assert sorted(ts[split.part(ts, "test")].tolist()) == [9, 10]
    with pytest.raises(ValueError, match="unknown split part"):
        split.part(ts, "holdout")


def test_rolling_windows_by_hand_are_consecutive_and_bounded():
    ts = np.arange(1, 21)  # 20 rows
    last = TimeSplit.ending_at(ts, 1.0, 0.1, 0.1)
    middle = TimeSplit.ending_at(ts, 0.9, 0.1, 0.1)
    assert (last.train_end, last.val_end, last.test_end) == (17, 19, None)
    assert (middle.train_end, middle.val_end, middle.test_end) == (15, 17, 19)
    assert ts[middle.part(ts, "test")].tolist() == [17, 18]  # ends where the next begins
    assert ts[middle.part(ts, "val")].tolist() == [15, 16]
    assert ts[last.part(ts, "test")].tolist() == [19, 20]
    with pytest.raises(ValueError, match="cannot hold"):
        TimeSplit.ending_at(ts, 0.15, 0.1, 0.1)


def test_time_split_ties_stay_together():
    ts = np.array([1, 1, 1, 2, 2, 2, 3, 3, 3, 3])
    split = TimeSplit.from_shares(ts, 0.5, 0.3)
    for value in np.unique(ts):
        names = {n for n in ("train", "val", "test") if split.part(ts, n)[ts == value].any()}
        assert len(names) == 1, value


# --- task_targets ------------------------------------------------------------------------


def test_task_targets_by_hand():
    ratings = np.array([1, 2, 3, 4, 5], dtype=np.int8)
    targets = task_targets(ratings, ("like", "love", "dislike"))
    assert targets.dtype == torch.float32
    assert targets.shape == (5, 3)
    assert targets.T.tolist() == [
        [0, 0, 0, 1, 1],  # like: rating >= 4
        [0, 0, 0, 0, 1],  # love: rating == 5
        [1, 1, 0, 0, 0],  # dislike: rating <= 2
    ]
    assert task_targets(ratings, ("love",)).shape == (5, 1)


def test_task_targets_unknown_task_raises():
    with pytest.raises(ValueError, match="unknown tasks \\['hate'\\]"):
        task_targets(np.array([1, 5]), ("like", "hate"))


# --- fit: determinism --------------------------------------------------------------------


@pytest.fixture
def vm_data(tiny_ml):
    """VM features, targets and a time split of the tiny ratings."""
    ctx = FeatureContext(tiny_ml, history_len=4, kg_per_item=4, kg_buckets=64)
    r = tiny_ml.ratings
    batch = ctx.vm_batch(r["user_id"], r["item_id"], r["ts"])
    examples = Examples(batch, task_targets(r["rating"].to_numpy(), TASKS))
    split = TimeSplit.from_shares(r["ts"].to_numpy(), 0.7, 0.15)
    ts = r["ts"].to_numpy()

    def part(name: str) -> Examples:
        return examples.take(torch.from_numpy(np.flatnonzero(split.part(ts, name))))

    return ctx.spec("vm"), part("train"), part("val"), part("test")


def _train(spec, train, val, seed: int, init_seed: int | None = None):
    cfg = TrainConfig(seed=seed, batch_size=64, max_epochs=3, patience=1, lr=1e-2)
    seed_everything(seed if init_seed is None else init_seed)
    model = VerticalModel(spec, **VM_SIZES)
    loss = fit(model, train, val, predict_vm, cfg, desc="test")
    return model, loss


def test_fit_is_deterministic_for_a_seed(vm_data):
    spec, train, val, _ = vm_data
    a, loss_a = _train(spec, train, val, seed=3)
    b, loss_b = _train(spec, train, val, seed=3)
    c, _ = _train(spec, train, val, seed=4)
    assert loss_a == loss_b and np.isfinite(loss_a)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name
    assert weights_digest(a) == weights_digest(b)
    assert weights_digest(a) != weights_digest(c)
    # Same initial weights, another training seed (batch order): other weights.
    d, _ = _train(spec, train, val, seed=4, init_seed=3)
    assert weights_digest(d) != weights_digest(a)
    assert not a.training  # fit leaves the model in eval mode


def test_fit_learns_and_restores_the_best_weights(vm_data):
    spec, train, val, _ = vm_data
    seed_everything(0)
    model = VerticalModel(spec, **VM_SIZES)
    initial = weights_digest(model)
    cfg = TrainConfig(seed=0, batch_size=64, max_epochs=3, patience=1, lr=1e-2)
    best = fit(model, train, val, predict_vm, cfg, desc="test")
    assert weights_digest(model) != initial
    assert _mean_loss(model, val, predict_vm, 8192) == pytest.approx(best, rel=1e-6)


def test_weights_digest_depends_on_config_and_weights(vm_data):
    spec = vm_data[0]
    seed_everything(0)
    model = VerticalModel(spec, **VM_SIZES)
    digest = weights_digest(model, config={"a": 1})
    assert len(digest) == 12
    assert weights_digest(model, config={"a": 1}) == digest
    assert weights_digest(model, config={"a": 2}) != digest
    with torch.no_grad():
        model.head.bias.add_(1.0)
    assert weights_digest(model, config={"a": 1}) != digest


# --- checkpoints -------------------------------------------------------------------------


def test_checkpoint_round_trip(tmp_path: Path, vm_data):
    spec, _, _, test = vm_data
    seed_everything(1)
    init = {"spec": spec, **VM_SIZES}
    model = VerticalModel(**init).eval()
    path = save_checkpoint(
        tmp_path / "nested" / "vm.pt", model, kind="vm", version="v-123", init=init
    )
    assert path.is_file()
    assert not path.with_suffix(".pt.tmp").exists()
    loaded, version = load_checkpoint(path, VerticalModel)
    assert version == "v-123"
    assert isinstance(loaded, VerticalModel) and not loaded.training
    assert loaded.spec == spec
    assert weights_digest(loaded) == weights_digest(model)
    with torch.inference_mode():
        assert torch.equal(predict_vm(loaded, test), predict_vm(model, test))


# --- seeds -------------------------------------------------------------------------------


def test_seed_everything_returns_a_seeded_generator():
    g1 = seed_everything(5)
    a = (torch.rand(3), np.random.rand(), torch.rand(3, generator=g1))
    g2 = seed_everything(5)
    b = (torch.rand(3), np.random.rand(), torch.rand(3, generator=g2))
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and torch.equal(a[2], b[2])


# --- settings ----------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch):
    """No SOLARIS_* variable from the outer environment leaks into a test."""
    for name in list(os.environ):
        if name.startswith("SOLARIS_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_config_precedence_file_env_override(tmp_path: Path, clean_env):
    path = tmp_path / "solaris.yaml"
    path.write_text("selection:\n  share: 0.3\n  ttl_hours: 3\ntrain:\n  seed: 11\n")
    assert SolarisConfig.load().selection.share == 0.2  # the default
    from_file = SolarisConfig.load(path)
    assert from_file.selection.share == 0.3
    assert from_file.train.seed == 11

    clean_env.setenv("SOLARIS_SELECTION__SHARE", "0.4")
    from_env = SolarisConfig.load(path)
    assert from_env.selection.share == 0.4  # env beats the file
    assert from_env.selection.ttl_hours == 3  # the file's other nested values stay
    assert from_env.train.seed == 11

    override = SolarisConfig.load(path, selection={"share": 0.5})
    assert override.selection.share == 0.5  # a keyword beats env and file


def test_config_path_from_env(tmp_path: Path, clean_env):
    path = tmp_path / "c.yaml"
    path.write_text("device: cpu\n")
    clean_env.setenv("SOLARIS_CONFIG", str(path))
    assert SolarisConfig.load().device == "cpu"


def test_config_missing_file_raises(tmp_path: Path, clean_env):
    with pytest.raises(ConfigError, match="not found"):
        SolarisConfig.load(tmp_path / "nope.yaml")
    clean_env.setenv("SOLARIS_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="config file not found"):
        SolarisConfig.load()


def test_config_rejects_unknown_keys(tmp_path: Path, clean_env):
    path = tmp_path / "c.yaml"
    path.write_text("no_such_setting: 1\n")
    with pytest.raises(ConfigError, match="no_such_setting"):
        SolarisConfig.load(path)


def test_config_is_frozen(clean_env):
    cfg = SolarisConfig.load()
    with pytest.raises(pydantic.ValidationError):
        cfg.device = "cpu"  # type: ignore[misc]


@pytest.mark.parametrize(("train_share", "val_share"), [(0.9, 0.1), (0.7, 0.3), (0.8, 0.5)])
def test_train_config_must_leave_a_test_period(train_share, val_share):
    with pytest.raises(pydantic.ValidationError, match="test period"):
        TrainConfig(train_share=train_share, val_share=val_share)
    TrainConfig(train_share=0.8, val_share=0.1)  # the defaults are fine


def test_feature_spec_round_trips_through_checkpoint_init(tmp_path: Path, vm_data):
    """The FeatureSpec dataclass survives in ``init`` (so a model can be rebuilt), stored as
    JSON beside weights that load with ``weights_only=True``."""
    spec = vm_data[0]
    seed_everything(0)
    model = VerticalModel(spec, **VM_SIZES)
    path = save_checkpoint(
        tmp_path / "m.pt", model, kind="vm", version="1", init={"spec": spec, **VM_SIZES}
    )
    weights = torch.load(path, weights_only=True)
    assert set(weights) == set(model.state_dict())
    assert all(isinstance(t, torch.Tensor) for t in weights.values())
    meta = json.loads(checkpoint_meta_path(path).read_text())
    assert meta["kind"] == "vm" and meta["version"] == "1"
    assert meta["init"]["spec"]["__dataclass__"] == "FeatureSpec"
    read, _ = read_checkpoint(path)
    assert read["init"]["spec"] == spec  # tuples come back as tuples: equal and hashable
    hash(read["init"]["spec"])


class _Payload:
    """Pickles to a call that creates ``marker``: what a planted checkpoint would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _plant(path: Path, marker: Path, *, with_meta: bool) -> None:
    """A pickle payload at ``path`` (and, if asked, metadata that matches it)."""
    torch.save({"state": _Payload(marker)}, path)
    if with_meta:
        meta = {
            "format": CHECKPOINT_FORMAT,
            "kind": "vm",
            "version": "evil",
            "init": {},
            "weights_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        }
        checkpoint_meta_path(path).write_text(json.dumps(meta))


@pytest.mark.parametrize("with_meta", [True, False])
def test_a_planted_pickle_checkpoint_is_refused_and_never_runs(tmp_path: Path, with_meta):
    path, marker = tmp_path / "vm.pt", tmp_path / "pwned"
    _plant(path, marker, with_meta=with_meta)
    with pytest.raises(CheckpointError, match=str(path)):
        load_checkpoint(path, VerticalModel)
    assert not marker.exists()
    # The payload is live: the old loader (weights_only=False) would have run it.
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_a_checkpoint_whose_weights_were_swapped_is_refused(tmp_path: Path, vm_data):
    spec = vm_data[0]
    a = save_checkpoint(
        tmp_path / "a.pt",
        VerticalModel(spec, **VM_SIZES),
        kind="vm",
        version="a",
        init={"spec": spec, **VM_SIZES},
    )
    b = save_checkpoint(
        tmp_path / "b.pt",
        VerticalModel(spec, **VM_SIZES),
        kind="vm",
        version="b",
        init={"spec": spec, **VM_SIZES},
    )
    a.write_bytes(b.read_bytes())  # weights of b under a's metadata
    with pytest.raises(CheckpointError, match="do not match their metadata"):
        load_checkpoint(a, VerticalModel)


def test_load_checkpoint_checks_the_kind(tmp_path: Path, vm_data):
    spec = vm_data[0]
    path = save_checkpoint(
        tmp_path / "vm.pt",
        VerticalModel(spec, **VM_SIZES),
        kind="vm",
        version="1",
        init={"spec": spec, **VM_SIZES},
    )
    with pytest.raises(CheckpointError, match="kind 'vm', expected 'fm'"):
        load_checkpoint(path, VerticalModel, kind="fm")


def test_save_checkpoint_rejects_init_values_json_cannot_hold(tmp_path: Path, vm_data):
    spec = vm_data[0]
    model = VerticalModel(spec, **VM_SIZES)
    folder = tmp_path / "models"
    with pytest.raises(CheckpointError, match=r"init\.spec \(type object\) cannot be stored"):
        save_checkpoint(folder / "m.pt", model, kind="vm", version="1", init={"spec": object()})
    assert not folder.exists()  # nothing written
