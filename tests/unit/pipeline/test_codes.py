"""The autoencoder's input: an FM's shared layer, checked before anything is trained on it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from solaris.config import SolarisConfig
from solaris.pipeline.codes import CodesError, fit_autoencoder


class _FM:
    """Declares ``shared_dim`` 8; gives ``width`` columns, NaN where asked."""

    version = "fm-narrow"
    shared_dim = 8

    def __init__(self, width: int, nan: bool = False) -> None:
        self.width, self.nan = width, nan

    def features(self, users: np.ndarray, items: np.ndarray, ts: np.ndarray) -> Any:
        return torch.ones((len(users), 3))

    def shared(self, batch: Any) -> torch.Tensor:
        h = torch.ones((len(batch), self.width))
        if self.nan:
            h[0, 0] = float("nan")
        return h


PAIRS = pd.DataFrame({"user_id": [1, 2, 3], "item_id": [4, 5, 6], "ts": [100, 100, 100]})


@pytest.mark.parametrize(
    ("fm", "message"),
    [
        (_FM(4), r"shared\(\) gave \(3, 4\) for a batch of 3 pairs, expected \(3, 8\)"),
        (_FM(8, nan=True), r"shared\(\) gave NaN or inf values"),
    ],
    ids=["narrower-than-declared", "nan"],
)
def test_an_fm_output_that_breaks_its_declaration_is_refused_before_training(
    fm: _FM, message: str
) -> None:
    """The drill's case: a narrower FM was trained on and its autoencoder and codes.json
    replaced the good ones; the error now comes before anything is fit or written."""
    with pytest.raises(CodesError, match=rf"model.foundation \(fm-narrow\): {message}"):
        fit_autoencoder(fm, PAIRS, SolarisConfig())


_ADAPTERS = """
import pandas as pd
import torch


class FM:
    version = "fm-narrow"
    shared_dim = 8

    def __init__(self, width):
        self.width = width

    def features(self, users, items, ts):
        return torch.ones((len(users), 3))

    def shared(self, batch):
        return torch.ones((len(batch), self.width))

    def to(self, device):
        return self


def good(cfg):
    return FM(8)


def narrow(cfg):
    return FM(4)


class Source:
    def __init__(self, cfg):
        pass

    def requests(self, start, end):
        return pd.DataFrame({"request_id": [1, 1, 2], "user_id": [1, 2, 3],
                             "item_id": [4, 5, 6], "ts": [start] * 3,
                             "label": [None] * 3, "score": [0.5] * 3})
"""


def test_a_narrower_fm_leaves_the_good_autoencoder_and_codes_json_as_they_were(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drill's harm, end to end: ``solaris fit-autoencoder`` with an FM narrower than it
    declares replaced the good autoencoder and ``codes.json``. Now it is refused and the
    models folder is byte for byte as it was."""
    import uuid

    from solaris.namespace import Namespace
    from solaris.pipeline.codes import fit_autoencoder_from_traffic

    name = f"fm_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(_ADAPTERS)
    monkeypatch.syspath_prepend(str(tmp_path))

    def settings(fm: str) -> SolarisConfig:
        return SolarisConfig(
            namespace="narrow_t",
            artifacts_dir=tmp_path / "artifacts",
            model={"foundation": f"{name}:{fm}"},
            train={"ae_epochs": 2},
            requests={"source": f"{name}:Source"},
        )

    _, _, version = fit_autoencoder_from_traffic(settings("good"), 0, 900)
    models = Namespace.of(settings("good")).models_root
    before = {str(p): p.read_bytes() for p in sorted(models.rglob("*")) if p.is_file()}
    assert str(models / "versions" / version / "codes.json") in before

    with pytest.raises(CodesError, match=r"gave \(3, 4\) for a batch of 3 pairs"):
        fit_autoencoder_from_traffic(settings("narrow"), 0, 900)
    after = {str(p): p.read_bytes() for p in sorted(models.rglob("*")) if p.is_file()}
    assert after == before and sorted(p.name for p in (models / "versions").iterdir()) == [
        version
    ]  # no draft left behind either
