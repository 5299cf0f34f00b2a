"""The MovieLens verifier adapters read the VM a publication names safely: the path is
confined to the artifacts root and the checkpoint loads with ``weights_only=True``.

The drill these tests reproduce: a candidates run scores with the verifier in force, whose
checkpoint path comes from ``verifier/<as_of>.json``; a planted pickle there ran its payload.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pandas as pd
import pytest
import torch

from solaris.config import SolarisConfig
from solaris.examples.movielens.adapters import (
    current_verifier,
    publish_verifier,
    vm_verifier,
)
from solaris.examples.movielens.models.batch import FeatureSpec
from solaris.examples.movielens.models.vm import VerticalModel
from solaris.files import ArtifactPathError
from solaris.models.checkpoints import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    checkpoint_meta_path,
    save_checkpoint,
    weights_digest,
)
from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout

AS_OF = 1_000_000
SPEC = FeatureSpec(
    n_dense=2,
    user_cat_cardinalities=(3,),
    n_items=10,
    item_cat_cardinalities=(4,),
    n_genres=5,
    kg_buckets=0,
    history_len=0,
    genres_per_item=2,
    kg_per_item=0,
)
INIT = {"spec": SPEC, "n_tiers": 0, "embed_dim": 4, "hidden": 8}


class _Payload:
    """Pickles to a call that creates ``marker``: what the planted checkpoint ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _plant(path: Path, marker: Path) -> Path:
    """A pickle payload at ``path``, with metadata that matches it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state": _Payload(marker)}, path)
    meta = {
        "format": CHECKPOINT_FORMAT,
        "kind": "vm",
        "version": "planted",
        "init": {},
        "weights_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    checkpoint_meta_path(path).write_text(json.dumps(meta))
    return path


@pytest.fixture
def cfg(tmp_path: Path) -> SolarisConfig:
    return SolarisConfig(artifacts_dir=tmp_path / "artifacts")


def _publish_raw(cfg: SolarisConfig, value: str) -> Path:
    """A publication naming ``value`` as its checkpoint, as any writer could leave it."""
    path = CycleLayout(Namespace.of(cfg)).verifier_publication(AS_OF)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"path": value, "version": "v", "as_of": AS_OF}))
    return path


def _candidates() -> pd.DataFrame:
    return pd.DataFrame({"user_id": [1], "item_id": [2], "ts": [AS_OF + 60]})


def test_a_planted_pickle_named_by_a_publication_is_refused_and_never_runs(cfg, tmp_path):
    marker = tmp_path / "pwned"
    layout = CycleLayout(Namespace.of(cfg))
    planted = _plant(layout.training(AS_OF) / "vm.pt", marker)
    _publish_raw(cfg, str(planted.resolve()))  # as the trainer used to write it
    # The candidates task's path: the verifier scores with the VM in force.
    with pytest.raises(CheckpointError, match=r"weights_only=True") as raised:
        vm_verifier(cfg).score(_candidates())
    assert str(planted) in str(raised.value)
    assert not marker.exists()


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_a_publication_pointing_outside_the_artifacts_root_is_refused(cfg, tmp_path, how):
    marker = tmp_path / "pwned"
    outside = _plant(tmp_path / "elsewhere" / "vm.pt", marker)
    if how == "absolute":
        value = str(outside)
    elif how == "dotdot":
        value = "namespaces/../../elsewhere/vm.pt"
    else:
        link = Path(cfg.artifacts_dir) / "namespaces" / "live" / "training" / "link.pt"
        link.parent.mkdir(parents=True)
        os.symlink(outside, link)
        value = link.relative_to(cfg.artifacts_dir).as_posix()
    publication = _publish_raw(cfg, value)
    with pytest.raises(ArtifactPathError) as raised:
        current_verifier(cfg, as_of=AS_OF + 60)
    message = str(raised.value)
    assert str(publication) in message and repr(value) in message
    assert not marker.exists()


def test_a_published_verifier_round_trips_through_a_relative_path(cfg):
    layout = CycleLayout(Namespace.of(cfg))
    torch.manual_seed(0)
    vm = VerticalModel(**INIT)
    version = "vm-" + weights_digest(vm)
    path = save_checkpoint(
        layout.training(AS_OF) / "vm.pt", vm, kind="vm", version=version, init=INIT
    )
    publication = publish_verifier(cfg, AS_OF, path, version=version, val_logloss=0.5)
    stored = json.loads(publication.read_text())["path"]
    assert not Path(stored).is_absolute()  # the artifacts folder can move
    loaded = current_verifier(cfg, as_of=AS_OF)
    assert loaded.version == version and loaded.path == path.resolve()
    assert weights_digest(loaded.vm) == weights_digest(vm)
    # An absolute path inside the root (what earlier publications stored) still reads.
    _publish_raw(cfg, str(path.resolve()))
    assert current_verifier(cfg, as_of=AS_OF).version == version


def test_a_verifier_published_in_a_bucket_round_trips_and_may_not_leave_it(tmp_path):
    import uuid

    from solaris.files import remove_tree, state_path

    bucket = f"memory://solaris-vm-{uuid.uuid4().hex[:8]}"
    cfg = SolarisConfig(artifacts_dir=tmp_path / "artifacts", cycle={"state_uri": bucket})
    layout = CycleLayout(Namespace.of(cfg))
    torch.manual_seed(0)
    vm = VerticalModel(**INIT)
    version = "vm-" + weights_digest(vm)
    try:
        path = save_checkpoint(
            layout.training(AS_OF) / "vm.pt", vm, kind="vm", version=version, init=INIT
        )
        publication = publish_verifier(cfg, AS_OF, path, version=version, val_logloss=0.5)
        stored = json.loads(publication.read_text())["path"]
        assert stored == f"namespaces/live/training/{AS_OF:011d}/vm.pt"
        loaded = current_verifier(cfg, as_of=AS_OF)
        assert loaded.version == version and str(loaded.path) == str(path)
        assert weights_digest(loaded.vm) == weights_digest(vm)
        _publish_raw(cfg, "s3://elsewhere/vm.pt")
        with pytest.raises(ArtifactPathError, match="not relative to the state root"):
            current_verifier(cfg, as_of=AS_OF)
    finally:
        remove_tree(state_path(bucket))
    assert not (tmp_path / "artifacts").exists()  # nothing of it on local disk


def test_the_package_reexports_the_adapters_lazily_and_completely() -> None:
    """``solaris.examples.movielens`` names the adapters without importing them (the CLI
    loads the package for its commands); each name resolves to the adapter itself."""
    import solaris.examples.movielens as package
    from solaris.examples.movielens import adapters

    assert package.__all__ == adapters.__all__
    for name in package.__all__:
        assert getattr(package, name) is getattr(adapters, name)
