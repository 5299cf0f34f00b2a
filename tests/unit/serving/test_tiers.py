"""assemble_tiers: presence, version, freshness (inclusive TTLs), exclusion and precedence."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from solaris.pipeline.aggregate import pack_f16, pack_f32
from solaris.serving.tiers import TIERS, assemble_tiers, empty_tiers, required_columns

D = 4
V = "fm-1"
NOW = 1_000_000
H = 3600
KW = dict(z_dim=D, fm_version=V, pair_ttl_s=6 * H, uagg_ttl_s=24 * H, iagg_ttl_s=24 * H)


def _f16(rows) -> list[bytes]:
    return pack_f16(np.asarray(rows, dtype=np.float32).reshape(-1, D))


def _f32(rows) -> list[bytes]:
    return pack_f32(np.asarray(rows, dtype=np.float32).reshape(-1, D))


def _missing(n: int) -> dict[str, list]:
    return {c: [None] * n for c in (*required_columns("top1"), "nbr__z_mean")}


def _row(**tiers) -> dict[str, list]:
    """One row's columns; each tier given as a dict of its features (missing otherwise)."""
    cols = _missing(1)
    for view, feats in tiers.items():
        for name, value in feats.items():
            cols[f"{view}__{name}"] = [value]
    return cols


def _pair(z, ca=NOW - 10, version=V):
    return {"z": _f16(z)[0], "fm_version": version, "computed_at": ca}


def _nbr(top1, mean=None, ca=NOW - 10, version=V):
    z_mean = _f16(mean)[0] if mean is not None else None
    return {"z_top1": _f16(top1)[0], "z_mean": z_mean, "fm_version": version, "computed_at": ca}


def _uagg(z_sum, count, window_start=NOW - 24 * H, ca=NOW - 5, version=V):
    return {
        "z_sum": _f32(z_sum)[0],
        "count": count,
        "window_start": window_start,
        "fm_version": version,
        "computed_at": ca,
    }


def _iagg(z_mean, count=3, ca=NOW - 10, version=V):
    return {"z_mean": _f32(z_mean)[0], "count": count, "fm_version": version, "computed_at": ca}


def _concat(*rows: dict[str, list]) -> dict[str, list]:
    return {k: [v for r in rows for v in r[k]] for k in rows[0]}


# -- freshness ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "present"),
    [(0, True), (6 * H, True), (6 * H + 1, False), (-1, False)],
    ids=["now", "exactly-ttl", "ttl-plus-1s", "computed-after-now"],
)
def test_pair_ttl_is_inclusive_and_future_rows_are_unused(age: int, present: bool) -> None:
    out = assemble_tiers(_row(pair=_pair([1, 2, 3, 4], ca=NOW - age)), NOW, **KW)
    assert out.mask[0, 0] == present
    expected = np.array([1, 2, 3, 4], np.float32) if present else np.zeros(D, np.float32)
    np.testing.assert_array_equal(out.tier_z[0, 0], expected)
    assert out.tier[0] == ("pair" if present else "none")


@pytest.mark.parametrize("view", ["uagg", "iagg"])
def test_aggregate_ttls_are_inclusive(view: str) -> None:
    make = {
        "uagg": lambda ca: _uagg([4, 4, 4, 4], 2, ca=ca),
        "iagg": lambda ca: _iagg([1] * 4, ca=ca),
    }
    k = TIERS.index(view)
    for age, present in [(24 * H, True), (24 * H + 1, False), (-1, False)]:
        out = assemble_tiers(_row(**{view: make[view](NOW - age)}), NOW, **KW)
        assert out.mask[0, k] == present, (view, age)


def test_nbr_uses_the_pair_ttl() -> None:
    fresh = assemble_tiers(_row(nbr=_nbr([1] * 4, ca=NOW - 6 * H)), NOW, **KW)
    stale = assemble_tiers(_row(nbr=_nbr([1] * 4, ca=NOW - 6 * H - 1)), NOW, **KW)
    assert fresh.mask[0, 1] and not stale.mask[0, 1]


def test_per_row_now_array() -> None:
    cols = _concat(_row(pair=_pair([1] * 4, ca=100)), _row(pair=_pair([1] * 4, ca=100)))
    out = assemble_tiers(cols, np.array([100 + 6 * H, 99]), **KW)
    assert out.mask[:, 0].tolist() == [True, False]


# -- version and bytes -------------------------------------------------------------------------


def test_wrong_version_is_missing_in_every_tier() -> None:
    cols = _row(
        pair=_pair([1] * 4, version="fm-0"),
        nbr=_nbr([1] * 4, version="fm-0"),
        uagg=_uagg([2] * 4, 2, version="fm-0"),
        iagg=_iagg([1] * 4, version="fm-0"),
    )
    out = assemble_tiers(cols, NOW, **KW)
    assert not out.mask.any()
    assert out.tier[0] == "none"
    assert not out.features.any()


def test_wrong_byte_length_is_missing() -> None:
    cols = _row(
        pair={**_pair([1] * 4), "z": b"\x00" * (2 * D + 2)},
        nbr={**_nbr([1] * 4), "z_top1": b"\x00" * (2 * D - 2)},
        uagg={**_uagg([2] * 4, 2), "z_sum": _f16([2] * 4)[0]},  # float16 where float32 is due
        iagg={**_iagg([1] * 4), "z_mean": b""},
    )
    out = assemble_tiers(cols, NOW, **KW)
    assert not out.mask.any()


def test_null_and_nan_values_are_missing() -> None:
    cols = _row(pair={**_pair([1] * 4), "computed_at": float("nan")}, iagg=_iagg([1] * 4))
    cols["iagg__count"] = [pd.NA]
    out = assemble_tiers(cols, NOW, **KW)
    assert not out.mask.any()


# -- user aggregate without the current item -------------------------------------------------


def test_uagg_excludes_the_current_item_when_its_pair_is_in_the_window() -> None:
    others = np.array([[1, 2, 3, 4], [3, 2, 1, 0.5]], np.float32)
    own = np.array([10, -10, 0.25, 8], np.float32)
    z_sum = others.sum(0) + own
    row = _row(pair=_pair(own, ca=NOW - 100), uagg=_uagg(z_sum, 3, ca=NOW - 5))
    out = assemble_tiers(row, NOW, **KW)
    np.testing.assert_allclose(out.tier_z[0, 2], others.mean(0), rtol=1e-6)
    assert out.tier[0] == "pair"

    # The pair is older than its serving TTL (not a hit) but still inside the 24 h window,
    # hence still counted in the sum: it must still be removed.
    old = _row(pair=_pair(own, ca=NOW - 10 * H), uagg=_uagg(z_sum, 3, ca=NOW - 5))
    out = assemble_tiers(old, NOW, **KW)
    assert not out.mask[0, 0] and out.tier[0] == "uagg"
    np.testing.assert_allclose(out.tier_z[0, 2], others.mean(0), rtol=1e-6)


@pytest.mark.parametrize(
    "pair_ca",
    [NOW - 24 * H, NOW - 1],  # at window_start (exclusive); after the aggregate was built
    ids=["at-window-start", "after-uagg-computed"],
)
def test_uagg_plain_mean_when_the_pair_is_outside_the_window(pair_ca: int) -> None:
    z_sum = np.array([6, 6, 6, 6], np.float32)
    row = _row(pair=_pair([100] * 4, ca=pair_ca), uagg=_uagg(z_sum, 3, ca=NOW - 5))
    out = assemble_tiers(row, NOW, **KW)
    np.testing.assert_allclose(out.tier_z[0, 2], z_sum / 3)


def test_uagg_plain_mean_when_the_pair_has_another_version() -> None:
    z_sum = np.array([6, 6, 6, 6], np.float32)
    row = _row(pair=_pair([100] * 4, version="fm-0"), uagg=_uagg(z_sum, 3))
    out = assemble_tiers(row, NOW, **KW)
    np.testing.assert_allclose(out.tier_z[0, 2], z_sum / 3)


def test_uagg_with_only_the_current_item_is_missing() -> None:
    own = [1, 2, 3, 4]
    out = assemble_tiers(_row(pair=_pair(own), uagg=_uagg(own, 1)), NOW, **KW)
    assert out.mask[0].tolist() == [True, False, False, False]
    assert not out.tier_z[0, 2].any()


# -- precedence, strategy, shapes ---------------------------------------------------------------


def test_tier_precedence_pair_nbr_uagg_iagg_none() -> None:
    p, nb, u, i = _pair([1] * 4), _nbr([2] * 4), _uagg([4] * 4, 2), _iagg([4] * 4)
    cols = _concat(
        _row(pair=p, nbr=nb, uagg=u, iagg=i),
        _row(nbr=nb, uagg=u, iagg=i),
        _row(uagg=u, iagg=i),
        _row(iagg=i),
        _row(),
    )
    out = assemble_tiers(cols, NOW, **KW)
    assert out.tier.tolist() == ["pair", "nbr", "uagg", "iagg", "none"]
    assert out.mask.sum(1).tolist() == [4, 3, 2, 1, 0]
    assert out.counts() == {"pair": 1, "nbr": 1, "uagg": 1, "iagg": 1, "none": 1}
    np.testing.assert_array_equal(out.tier_z[0, :, 0], [1, 2, 3, 4])  # uagg: (4 - 1) / 1
    np.testing.assert_array_equal(out.tier_z[2, 2], [2] * 4)  # no pair: 4 / 2
    assert out.features.shape == (5, 4 * D) and out.features.dtype == np.float32
    assert np.shares_memory(out.tier_z, out.features)


def test_nbr_strategy_chooses_the_vector() -> None:
    row = _row(nbr=_nbr([1] * 4, mean=[2] * 4))
    top1 = assemble_tiers(row, NOW, **KW, nbr_strategy="top1")
    weighted = assemble_tiers(row, NOW, **KW, nbr_strategy="weighted")
    np.testing.assert_array_equal(top1.tier_z[0, 1], [1] * 4)
    np.testing.assert_array_equal(weighted.tier_z[0, 1], [2] * 4)
    only_top1 = _row(nbr=_nbr([1] * 4))
    assert not assemble_tiers(only_top1, NOW, **KW, nbr_strategy="weighted").mask.any()
    with pytest.raises(ValueError, match="nbr_strategy"):
        assemble_tiers(row, NOW, **KW, nbr_strategy="mean")


def test_empty_input_and_empty_tiers() -> None:
    out = assemble_tiers(_missing(0), NOW, **KW)
    assert out.features.shape == (0, 4 * D) and out.mask.shape == (0, 4) and len(out.tier) == 0
    assert out.counts() == {"pair": 0, "nbr": 0, "uagg": 0, "iagg": 0, "none": 0}
    e = empty_tiers(3, D)
    assert not e.features.any() and not e.mask.any() and e.tier.tolist() == ["none"] * 3
    assert e.tier_z.shape == (3, 4, D)


def test_columns_as_pandas_and_numpy() -> None:
    cols = _concat(_row(pair=_pair([1] * 4)), _row(iagg=_iagg([2] * 4)))
    frame = pd.DataFrame(cols)
    as_lists = assemble_tiers(cols, NOW, **KW)
    as_frame = assemble_tiers({c: frame[c] for c in frame}, NOW, **KW)
    as_numpy = assemble_tiers({c: np.asarray(v, dtype=object) for c, v in cols.items()}, NOW, **KW)
    for other in (as_frame, as_numpy):
        np.testing.assert_array_equal(other.features, as_lists.features)
        np.testing.assert_array_equal(other.mask, as_lists.mask)
        assert other.tier.tolist() == as_lists.tier.tolist() == ["pair", "iagg"]


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="missing"):
        assemble_tiers({"pair__z": []}, NOW, **KW)
    cols = _missing(2)
    cols["pair__z"] = [None]
    with pytest.raises(ValueError, match="different lengths"):
        assemble_tiers(cols, NOW, **KW)
    with pytest.raises(ValueError, match="now"):
        assemble_tiers(_missing(2), np.array([1, 2, 3]), **KW)
