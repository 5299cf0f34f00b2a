"""Model versions on real files: a version is written whole and never again, and a namespace
reads the version pinned for it (the older flat layout without a pin)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from solaris.model_versions import (
    NEWEST,
    VERSION_PATTERN,
    ModelPinError,
    ModelVersionError,
    commit_version,
    draft_folder,
    models_folder,
    pin_version,
    pinned,
    pins,
    versions,
)
from solaris.namespace import Namespace


def _version(root: Path, payload: bytes) -> str:
    draft = draft_folder(root)
    (draft / "codes.json").write_bytes(payload)
    (draft / "sub").mkdir()
    (draft / "sub" / "weights.pt").write_bytes(payload * 3)
    return commit_version(root, draft)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_a_committed_version_is_named_by_time_and_digest_and_its_files_are_read_only(
    tmp_path: Path,
) -> None:
    version = _version(tmp_path, b"one")
    assert re.fullmatch(VERSION_PATTERN, version)
    folder = tmp_path / "versions" / version
    assert _files(folder) == {"codes.json": b"one", "sub/weights.pt": b"oneoneone"}
    assert all(p.stat().st_mode & 0o222 == 0 for p in folder.rglob("*") if p.is_file())
    assert versions(tmp_path) == [version]  # no draft folder left, none listed


def test_a_second_version_leaves_the_first_byte_for_byte_and_is_listed_after_it(
    tmp_path: Path,
) -> None:
    first = _version(tmp_path, b"one")
    before = _files(tmp_path / "versions" / first)
    second = _version(tmp_path, b"two")
    assert versions(tmp_path) == [first, second]  # by age
    assert _files(tmp_path / "versions" / first) == before


def test_a_draft_that_is_never_committed_is_not_a_version(tmp_path: Path) -> None:
    draft = draft_folder(tmp_path)
    (draft / "codes.json").write_text("{}")
    assert versions(tmp_path) == []
    with pytest.raises(ModelVersionError, match="no model files"):
        commit_version(tmp_path, draft_folder(tmp_path))


def test_a_namespace_reads_its_pin_and_another_namespace_is_not_moved_by_it(
    tmp_path: Path,
) -> None:
    first, second = _version(tmp_path, b"one"), _version(tmp_path, b"two")
    pin_version(tmp_path, "a", first, live=None)
    pin_version(tmp_path, "b", second, live=None)
    assert models_folder(tmp_path, "a") == tmp_path / "versions" / first
    assert models_folder(tmp_path, "b") == tmp_path / "versions" / second
    pin = pin_version(tmp_path, "a", second, live=None)
    assert (pin.version, pin.previous, pin.forced) == (second, first, False)
    assert {n: p.version for n, p in pins(tmp_path).items()} == {"a": second, "b": second}


def test_the_namespace_resolves_models_dir_through_its_pin(tmp_path: Path) -> None:
    namespace = Namespace("ns_a", tmp_path / "artifacts", tmp_path / "repo")
    version = _version(namespace.models_root, b"one")
    pin_version(namespace.models_root, "ns_a", version, live=None)
    assert namespace.models_dir == namespace.models_root / "versions" / version


def test_an_older_flat_layout_is_read_by_a_namespace_without_a_pin(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "codes.json").write_text("{}")
    version = _version(tmp_path, b"one")
    assert models_folder(tmp_path, "old") == tmp_path  # as before, unchanged
    pin_version(tmp_path, "new", version, live=None)
    assert models_folder(tmp_path, "new") == tmp_path / "versions" / version


def test_no_pin_while_versions_exist_names_them_and_the_promote_command(tmp_path: Path) -> None:
    version = _version(tmp_path, b"one")
    with pytest.raises(ModelVersionError, match=rf"'lost' pins no model version.*{version}.*"
                       r"solaris models promote --namespace lost VERSION"):  # fmt: skip
        models_folder(tmp_path, "lost")


def test_nothing_at_all_reads_the_models_root_so_the_readers_say_to_train_first(
    tmp_path: Path,
) -> None:
    assert models_folder(tmp_path / "models", "fresh") == tmp_path / "models"


def test_an_unknown_version_is_refused_naming_those_that_exist_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    version = _version(tmp_path, b"one")
    before = _files(tmp_path)
    with pytest.raises(ModelVersionError, match=rf"no model version '../x'.*are {version}"):
        pin_version(tmp_path, "a", "../x", live=None)
    assert _files(tmp_path) == before and pinned(tmp_path, "a") is None


def test_a_live_namespace_is_refused_without_force_and_pinned_with_it(tmp_path: Path) -> None:
    first, second = _version(tmp_path, b"one"), _version(tmp_path, b"two")
    pin_version(tmp_path, "live", first, live=None)
    before = _files(tmp_path)
    with pytest.raises(ModelPinError, match=r"namespace 'live'.*served live traffic.*--force"):
        pin_version(tmp_path, "live", second, live="'live' served live traffic")
    assert _files(tmp_path) == before
    pin = pin_version(tmp_path, "live", second, live="'live' served live traffic", force=True)
    assert (pin.version, pin.forced, pin.previous) == (second, True, first)


def test_a_pin_naming_a_missing_version_or_unreadable_is_an_error_naming_the_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "pins").mkdir(parents=True)
    (tmp_path / "pins" / "a.json").write_text("{not json")
    with pytest.raises(ModelVersionError, match=r"pins/a\.json is not a model pin"):
        models_folder(tmp_path, "a")
    pin = {"namespace": "b", "version": "20260101T000000.000000Z-0123abcd", "promoted_at": "x",
           "forced": False, "previous": None}  # fmt: skip
    (tmp_path / "pins" / "b.json").write_text(json.dumps(pin))
    with pytest.raises(
        ModelVersionError, match=r"pins model version 20260101T000000.000000Z-0123abcd"
    ):
        models_folder(tmp_path, "b")


def test_newest_names_the_newest_version_and_nothing_when_there_is_none(tmp_path: Path) -> None:
    with pytest.raises(ModelVersionError, match=r"'newest'.*there is none"):
        pin_version(tmp_path, "a", NEWEST, live=None)
    assert not (tmp_path / "pins").exists()
    _version(tmp_path, b"one")
    second = _version(tmp_path, b"two")
    assert pin_version(tmp_path, "a", NEWEST, live=None).version == second
