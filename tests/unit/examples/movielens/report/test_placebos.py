"""The causal placebo and the user control: every donor code is as of the row's time or
earlier, and comes from another user (placebo) or the same user and part (control)."""

import numpy as np
import pandas as pd

from solaris.examples.movielens.report.experiments import (
    VMRows,
    earlier_code_of_other_user,
    earlier_code_of_same_user,
)
from solaris.examples.movielens.report.tiers import Tier


def _rows(n: int = 400, seed: int = 0) -> tuple[VMRows, Tier]:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 2_000, n)) * 5  # ties: rows of one request share a time
    part = np.where(ts < 6_000, "train", np.where(ts < 8_000, "val", "test"))
    frame = pd.DataFrame(
        {"user_id": rng.integers(1, 12, n), "item_id": rng.integers(1, 50, n), "ts": ts}
    ).assign(part=part)
    # Each row's code is its own index, so a donor can be read back from the code.
    z = np.repeat(np.arange(n, dtype=np.float32)[:, None], 3, axis=1)
    return VMRows(frame), Tier(z, np.ones(n, bool))


def _donor_and_row(rows: VMRows, tier: Tier, column: str) -> tuple[np.ndarray, np.ndarray]:
    """``column`` of each present row's donor and of the row itself; the donor's time is
    checked to be at or before the row's on the way."""
    donor = tier.z[tier.present, 0].astype(int)  # each code is its row's index
    me = np.flatnonzero(tier.present)
    ts = rows.rows["ts"].to_numpy()
    assert (ts[donor] <= ts[me]).all()
    values = rows.rows[column].to_numpy()
    return values[donor], values[me]


def test_another_users_code_is_causal_and_never_the_users_own():
    rows, codes = _rows()
    placebo = earlier_code_of_other_user(codes, rows, seed=3)
    donor, me = _donor_and_row(rows, placebo, "user_id")
    assert (donor != me).all()
    assert placebo.present.mean() > 0.95  # only the very first rows lack a donor
    assert (placebo.z[~placebo.present] == 0).all()


def test_the_users_own_earlier_code_stays_in_the_user_and_part_and_is_causal():
    rows, codes = _rows()
    control = earlier_code_of_same_user(codes, rows, seed=3)
    r = rows.rows
    donor_index = control.z[control.present, 0].astype(int)
    assert (donor_index != np.flatnonzero(control.present)).all()  # never the row itself
    for column in ("user_id", "part"):
        donor, me = _donor_and_row(rows, control, column)
        assert (donor == me).all(), column
    # A row has a donor exactly when another row of its user and part is at or before it.
    ts, key = r["ts"].to_numpy(), r["user_id"].astype(str) + r["part"]
    others = np.array([((key == k) & (ts <= t)).sum() - 1 for k, t in zip(key, ts, strict=True)])
    np.testing.assert_array_equal(control.present, others > 0)


def test_the_donors_are_drawn_from_the_seed():
    rows, codes = _rows()
    a = earlier_code_of_other_user(codes, rows, seed=1)
    b = earlier_code_of_other_user(codes, rows, seed=1)
    c = earlier_code_of_other_user(codes, rows, seed=2)
    np.testing.assert_array_equal(a.z, b.z)
    assert not np.array_equal(a.z, c.z)
