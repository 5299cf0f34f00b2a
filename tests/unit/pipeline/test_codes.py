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
