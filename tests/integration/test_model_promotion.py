"""Model versions through the CLI, on real files and a real Redis live marker.

The harm it guards against (issue 45, item 10): a training run rewrote the models folder
every namespace shares, so a namespace serving live traffic changed FM under its VM and the
old models were gone. Here each training is a new version, the first stays byte for byte,
the readers read the namespace's pin, and a live namespace's pin moves only with --force.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis as redis_py
import yaml
from typer.testing import CliRunner

from solaris.cli import app
from solaris.config import SolarisConfig
from solaris.model_versions import pinned, version_folder, versions
from solaris.namespace import Namespace

pytestmark = pytest.mark.integration

START = 1_699_920_000  # the synthetic world's first request (SyntheticWorld().spec.start_ts)


def _sample(hours: int) -> list[str]:
    """The first ``hours`` of traffic: each sample trains another autoencoder."""
    return ["--start", str(START), "--end", str(START + hours * 3600)]


@dataclass
class World:
    config: Path
    cfg: SolarisConfig

    @property
    def root(self) -> Path:
        return Namespace.of(self.cfg).models_root


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, redis_connection: str) -> World:
    """The synthetic example's log and FM, settings naming a namespace of its own on the
    integration Redis (where serving's live marker is looked up)."""
    from solaris.examples.synthetic import SyntheticWorld, prepare

    assert SyntheticWorld().spec.start_ts == START
    tmp = tmp_path_factory.mktemp("model_versions")
    settings = {
        "namespace": f"mv_{uuid.uuid4().hex[:8]}",
        "replay": True,
        "artifacts_dir": str(tmp / "artifacts"),
        "device": "cpu",
        "model": {
            "foundation": "solaris.examples.synthetic:foundation_model",
            "trainer": None,
            "z_dim": 8,
        },
        "requests": {"source": "solaris.examples.synthetic:traffic"},
        "store": {"redis": redis_connection},
        "train": {"ae_epochs": 1},
    }
    path = tmp / "solaris.yaml"
    path.write_text(yaml.safe_dump(settings))
    cfg = SolarisConfig.load(path)
    prepare(cfg)
    return World(path, cfg)


@pytest.fixture
def live_marker(world: World, redis_client: redis_py.Redis) -> Iterator[str]:
    """Serving's live-traffic marker of the world's namespace, set for the test."""
    key = Namespace.of(world.cfg).live_key
    yield key
    redis_client.delete(key)


def _cli(world: World, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--config", str(world.config)])
    return result.exit_code, result.output


def _bytes(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _state(world: World, client: redis_py.Redis) -> tuple[dict, dict]:
    """Every path under the artifacts (files with size and mtime) and every Redis key of
    the namespace with its contents."""
    files = {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else "dir"
        for p in sorted(Path(world.cfg.artifacts_dir).rglob("*"))
    }
    keys = {k: client.dump(k) for k in sorted(client.scan_iter(match=f"{world.cfg.namespace}:*"))}
    return files, keys


def test_training_adds_versions_and_only_promote_moves_a_live_namespaces_pin(
    world: World, redis_client: redis_py.Redis, live_marker: str
) -> None:
    from solaris.examples.synthetic import foundation_model
    from solaris.manifest import current_fm_version, read_manifest
    from solaris.orchestration.layout import CycleLayout
    from solaris.pipeline.codes import load_autoencoder

    ns = world.cfg.namespace
    # A replay namespace: fit-autoencoder pins the version it trained for it.
    code, out = _cli(world, "fit-autoencoder", *_sample(24))
    assert code == 0, out
    [first] = versions(world.root)
    assert f"namespace {ns!r} now reads model version {first}" in out
    kept = _bytes(version_folder(world.root, first))
    code, out = _cli(world, "fit-autoencoder", *_sample(12))
    assert code == 0, out
    [_, second] = versions(world.root)
    assert _bytes(version_folder(world.root, first)) == kept  # the first, byte for byte
    fm = {v: read_manifest(version_folder(world.root, v)).fm_version for v in (first, second)}
    assert fm[first] != fm[second]

    code, out = _cli(world, "models", "list", "--namespace", ns)
    assert code == 0, out
    assert f"{first}  fm_version {fm[first]}  pinned by: -\n" in out
    assert f"{second}  fm_version {fm[second]}  pinned by: {ns}\n" in out

    # Every reader reads the pinned version: serving's fm_version, the cycle's autoencoder.
    assert current_fm_version(world.cfg) == fm[second]
    code, out = _cli(world, "models", "promote", "--namespace", ns, first)
    assert code == 0 and f"reads model version {first} (was {second})" in out, out
    assert current_fm_version(world.cfg) == fm[first]
    layout = CycleLayout(Namespace.of(world.cfg))
    assert load_autoencoder(layout.models_dir, foundation_model(world.cfg))[1] == fm[first]

    # Serving marks the namespace live: its pin no longer moves without --force.
    redis_client.set(live_marker, "2026-12-07T00:00:00Z")
    before = _state(world, redis_client)
    code, out = _cli(world, "models", "promote", "--namespace", ns, second)
    assert code == 1 and f"namespace {ns!r}" in out and "served live traffic" in out, out
    assert f"solaris models promote --namespace {ns} {second} --force" in out
    code, out = _cli(
        world, "models", "promote", "--namespace", ns, "20990101T000000.000000Z-0123abcd"
    )
    assert code == 1 and f"are {first}, {second}" in out, out
    assert _state(world, redis_client) == before

    # Training on a live namespace adds a version and leaves its pin.
    code, out = _cli(world, "fit-autoencoder", *_sample(6))
    assert code == 0, out
    third = versions(world.root)[-1]
    assert third not in (first, second) and f"--namespace {ns} {third} --force" in out
    assert pinned(world.root, ns).version == first
    assert current_fm_version(world.cfg) == fm[first]
    assert _bytes(version_folder(world.root, first)) == kept

    code, out = _cli(world, "models", "promote", "--namespace", ns, second, "--force")
    assert code == 0, out
    pin = pinned(world.root, ns)
    assert (pin.version, pin.forced, pin.previous) == (second, True, first)
    assert current_fm_version(world.cfg) == fm[second]


@pytest.mark.parametrize("marked", [False, True], ids=["the-live-namespace", "marked-live"])
def test_the_demo_on_a_live_namespace_is_refused_before_training_and_writes_nothing(
    world: World, redis_client: redis_py.Redis, live_marker: str, marked: bool
) -> None:
    ns = world.cfg.namespace if marked else "live"
    if marked:
        redis_client.set(live_marker, "2026-12-07T00:00:00Z")
    before = _state(world, redis_client)
    code, out = _cli(world, "demo", "--namespace", ns, "--no-airflow")
    assert code == 1, out
    assert f"will not train the demo's models and pin them for namespace {ns!r}" in out
    assert f"solaris demo --namespace {ns} --force" in out
    assert _state(world, redis_client) == before
