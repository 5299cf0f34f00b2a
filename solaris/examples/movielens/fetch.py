"""Obtain MovieLens-100K from the ``recbole`` wheel at set-up time.

The data set's licence forbids redistribution, so it is never committed: it is unpacked from
the PyPI wheel into a cache directory outside the repository.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from solaris.config import DataConfig
from solaris.errors import SolarisError

__all__ = ["MOVIELENS_FILES", "DataFetchError", "fetch_movielens", "is_fetched", "movielens_dir"]

MOVIELENS_FILES = (
    "ml-100k.inter",
    "ml-100k.user",
    "ml-100k.item",
    "ml-100k.kg",
    "ml-100k.link",
)
_WHEEL_FOLDER = "recbole/dataset_example/ml-100k/"


class DataFetchError(SolarisError, RuntimeError):
    """MovieLens could not be obtained; the message says which step failed."""


def movielens_dir(cfg: DataConfig) -> Path:
    return cfg.cache_dir / "ml-100k"


def is_fetched(cfg: DataConfig) -> bool:
    folder = movielens_dir(cfg)
    return all((folder / name).is_file() for name in MOVIELENS_FILES)


def fetch_movielens(cfg: DataConfig, *, force: bool = False) -> Path:
    """Unpack MovieLens-100K into ``cfg.cache_dir/ml-100k`` and return that folder.

    Idempotent: an existing complete copy is kept unless ``force``. The files are unpacked
    into a staging folder beside the target and renamed into place, so an interrupted fetch
    never leaves a half-written ``ml-100k`` behind (with ``force``, the old copy is removed
    just before the rename).
    """
    target = movielens_dir(cfg)
    if is_fetched(cfg) and not force:
        return target
    cfg.cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cfg.cache_dir, prefix=".fetch-") as tmp:
        wheel = _download_wheel(cfg.recbole_version, Path(tmp))
        staged = Path(tmp) / "ml-100k"
        _extract_movielens(wheel, staged)
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    return target


def _download_wheel(version: str, dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        f"recbole=={version}",
        "-d",
        str(dest),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("recbole-*.whl"))
    if result.returncode != 0 or not wheels:
        raise DataFetchError(
            f"could not download recbole=={version} from the package index "
            f"(pip exit {result.returncode}): {result.stderr.strip()[-500:]}"
        )
    return wheels[0]


def _extract_movielens(wheel: Path, staged: Path) -> None:
    staged.mkdir()
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for name in MOVIELENS_FILES:
            member = _WHEEL_FOLDER + name
            if member not in names:
                raise DataFetchError(f"{wheel.name} has no {member}")
            with zf.open(member) as src, open(staged / name, "wb") as dst:
                shutil.copyfileobj(src, dst)
