"""The codes SOLARIS serves: an autoencoder ``h -> z`` trained on the user's FM, versioned.

Whatever FM a user brings (:class:`solaris.adapters.FoundationModel`), SOLARIS trains the
autoencoder on that FM's last shared layer ``h`` and stores it, with a manifest
``codes.json``, as a new model version (:mod:`solaris.model_versions`)::

    {"fm_version": "<the version every served row carries>", "fm": "<FM.version>",
     "z_dim": 32, "shared_dim": 24}

``fm_version`` is what rows are written with and what a VM must ask for
(``SolarisFeatures(..., fm_version=...)``); it changes whenever the FM or the autoencoder
does. Readers that need only the version (enrichment, serving) read the manifest and import
no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from solaris.files import atomic_write_json
from solaris.manifest import CODES_MANIFEST, CodesError, CodesManifest, read_manifest

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from solaris.adapters import FoundationModel
    from solaris.config import SolarisConfig
    from solaris.models.autoencoder import Autoencoder

__all__ = [
    "CODES_MANIFEST",
    "CodesError",
    "CodesManifest",
    "fit_autoencoder",
    "fit_autoencoder_from_traffic",
    "fit_autoencoder_on",
    "load_autoencoder",
    "read_manifest",
    "save_autoencoder",
    "shared_layer",
]

AUTOENCODER_FILE = "autoencoder.pt"


def shared_layer(
    fm: FoundationModel,
    users: np.ndarray,
    items: np.ndarray,
    ts: np.ndarray,
    *,
    batch_size: int = 8192,
) -> torch.Tensor:
    """``h`` ``[N, shared_dim]`` (float32, CPU) of the pairs as of ``ts``. An FM whose
    output is not ``[batch, fm.shared_dim]`` finite values is a :class:`CodesError` naming
    what it gave: nothing downstream (an autoencoder, ``codes.json``) is built on it."""
    import torch

    shared_dim = int(fm.shared_dim)
    parts = []
    with torch.inference_mode():
        for i in range(0, len(users), batch_size):
            rows = slice(i, i + batch_size)
            h = fm.shared(fm.features(users[rows], items[rows], ts[rows]))
            n = len(users[rows])
            if not isinstance(h, torch.Tensor) or tuple(h.shape) != (n, shared_dim):
                shape = tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__
                raise CodesError(
                    f"model.foundation ({fm.version}): shared() gave {shape} for a batch of "
                    f"{n} pairs, expected ({n}, {shared_dim}) (its shared_dim); nothing was "
                    "written"
                )
            h = h.float().cpu()
            if not torch.isfinite(h).all():
                raise CodesError(
                    f"model.foundation ({fm.version}): shared() gave NaN or inf values; "
                    "nothing was written"
                )
            parts.append(h)
    return torch.cat(parts) if parts else torch.zeros((0, shared_dim))


def fit_autoencoder_on(h: torch.Tensor, cfg: SolarisConfig) -> tuple[Autoencoder, float]:
    """Fit an autoencoder on ``h`` ``[N, shared_dim]`` (any FM's); returns (ae, mse)."""
    import torch
    from tqdm.auto import tqdm

    from solaris.models.autoencoder import Autoencoder
    from solaris.models.device import seed_everything

    gen = seed_everything(cfg.train.seed)
    shared_dim = int(h.shape[1])
    ae = Autoencoder(in_dim=shared_dim, z_dim=cfg.model.z_dim, hidden=2 * shared_dim)
    ae.fit_scaler(h)
    opt = torch.optim.Adam(ae.parameters(), lr=cfg.train.lr)
    for _ in tqdm(range(cfg.train.ae_epochs), desc="autoencoder", unit="epoch", leave=False):
        ae.train()
        order = torch.randperm(len(h), generator=gen)
        for i in range(0, len(h), cfg.train.batch_size):
            opt.zero_grad(set_to_none=True)
            ae.reconstruction_loss(h[order[i : i + cfg.train.batch_size]]).backward()
            opt.step()
    ae.eval()
    with torch.inference_mode():
        mse = float(ae.reconstruction_loss(h))
    return ae, mse


def fit_autoencoder(
    fm: FoundationModel, pairs: pd.DataFrame, cfg: SolarisConfig
) -> tuple[Autoencoder, str, float]:
    """Train ``h -> z`` on the FM's ``h`` of ``pairs`` (``user_id, item_id, ts``).

    Returns ``(autoencoder, fm_version, reconstruction MSE)``; ``fm_version`` hashes the
    FM's version, the autoencoder's weights and ``z_dim``.
    """
    from solaris.models.checkpoints import weights_digest

    if len(pairs) == 0:
        raise CodesError("no pairs to train the autoencoder on")
    h = shared_layer(
        fm,
        pairs["user_id"].to_numpy(np.int64),
        pairs["item_id"].to_numpy(np.int64),
        pairs["ts"].to_numpy(np.int64),
    )
    ae, mse = fit_autoencoder_on(h, cfg)
    version = "fm-" + weights_digest(ae, config={"fm": fm.version, "z_dim": cfg.model.z_dim})
    return ae, version, mse


def save_autoencoder(
    models_dir: Path, ae: Autoencoder, *, fm_version: str, fm: str
) -> CodesManifest:
    """Write the autoencoder checkpoint, then its manifest (the manifest last: a reader
    that sees the manifest finds the checkpoint it names)."""
    from solaris.models.checkpoints import save_checkpoint

    models_dir = Path(models_dir)
    init = {"in_dim": ae.in_dim, "z_dim": ae.z_dim, "hidden": ae.hidden}
    save_checkpoint(
        models_dir / AUTOENCODER_FILE, ae, kind="autoencoder", version=fm_version, init=init
    )
    manifest = CodesManifest(fm_version, fm, ae.z_dim, ae.in_dim)
    atomic_write_json(models_dir / CODES_MANIFEST, manifest.__dict__)
    return manifest


def fit_autoencoder_from_traffic(
    cfg: SolarisConfig, start: int, end: int, max_pairs: int = 200_000
) -> tuple[CodesManifest, float, str]:
    """Train the autoencoder on ``model.foundation``'s ``h`` of the distinct pairs of
    ``requests.source`` in ``[start, end)`` (each as of its first request; a seeded sample
    of at most ``max_pairs``) and save it as a new model version beside the others
    (:mod:`solaris.model_versions`); returns its manifest, reconstruction MSE and version
    id. No namespace's pin changes here: the caller promotes it (``solaris fit-autoencoder``
    does for its own namespace)."""
    import shutil

    from solaris import adapters
    from solaris.model_versions import commit_version, draft_folder
    from solaris.namespace import Namespace

    if end <= start:
        raise CodesError(f"the sample's end {end} is not after its start {start}")
    fm = adapters.foundation_model(cfg)
    rows = adapters.traffic_requests(cfg, start, end)
    pairs = rows.drop_duplicates(["user_id", "item_id"])[["user_id", "item_id", "ts"]]
    if len(pairs) > max_pairs:
        pairs = pairs.sample(n=max_pairs, random_state=cfg.train.seed)
    ae, version, mse = fit_autoencoder(fm, pairs, cfg)
    root = Namespace.of(cfg).models_root
    draft = draft_folder(root)
    try:
        manifest = save_autoencoder(draft, ae, fm_version=version, fm=fm.version)
        return manifest, mse, commit_version(root, draft)
    finally:
        shutil.rmtree(draft, ignore_errors=True)  # gone already when committed


def load_autoencoder(models_dir: Path, fm: FoundationModel) -> tuple[Autoencoder, str]:
    """The autoencoder of ``models_dir`` and its ``fm_version``, checked against ``fm``."""
    from solaris.models.autoencoder import Autoencoder
    from solaris.models.checkpoints import load_checkpoint

    manifest = read_manifest(models_dir)
    if manifest.fm != fm.version:
        raise CodesError(
            f"the autoencoder in {models_dir} was trained on FM {manifest.fm}, but "
            f"model.foundation gives FM {fm.version}: train it again on this FM "
            "(`solaris fit-autoencoder`)"
        )
    ae, version = load_checkpoint(
        Path(models_dir) / AUTOENCODER_FILE, Autoencoder, kind="autoencoder"
    )
    if version != manifest.fm_version:
        raise CodesError(
            f"{models_dir}: autoencoder checkpoint {version} does not match its manifest "
            f"{manifest.fm_version} (a write was interrupted: train it again)"
        )
    return ae, version
