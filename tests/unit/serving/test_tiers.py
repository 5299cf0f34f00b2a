"""assemble_tiers and mean_excluding: presence, version, freshness (inclusive TTLs), exclusion
of the current item and precedence, on view rows that went through the store's record codec.

Every test runs twice: on decoded rows (:class:`ViewRows`, training's and the general path)
and, where every row of a view is present with records of one length, on the records
themselves (:class:`RecordRows`, the request path's compiled loop)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from solaris.config import ModelConfig, SolarisConfig
from solaris.pipeline.aggregate import user_aggregate
from solaris.serving.tiers import (
    TIERS,
    TierAssembly,
    TierInputError,
    assemble_tiers,
    empty_tiers,
    mean_excluding,
    tier_settings,
)
from solaris.store import codec
from solaris.store.codec import ViewRows
from solaris.store.contract import (
    COUNT,
    EVENT_TS,
    FM_VERSION,
    IAGG,
    ITEM_ID,
    N_NBRS,
    NBR,
    PAIR,
    SIMILARITY,
    SRC_USER,
    UAGG,
    USER_ID,
    WINDOW_START,
    Z_MEAN,
    Z_SUM,
    Z_TOP1,
    ViewSpec,
    Z,
)

D = 4
V = "fm-1"
NOW = 1_000_000
H = 3600
KW = dict(
    z_dim=D,
    fm_version=V,
    pair_ttl_s=6 * H,
    nbr_ttl_s=6 * H,
    uagg_ttl_s=24 * H,
    iagg_ttl_s=24 * H,
)
CFG = SolarisConfig(model=ModelConfig(z_dim=D))
SPECS: dict[str, ViewSpec] = {spec.name: spec for spec in (PAIR, NBR, UAGG, IAGG)}
USER, ITEM = 1, 2

Row = dict[str, object]
"""One view's row: its join keys, features and ``event_ts``, as a DataFrame row."""

_AS_RECORDS = {"on": False}


@pytest.fixture(autouse=True, params=["decoded rows", "records"])
def _rows_kind(request: pytest.FixtureRequest) -> None:
    """Run each test on decoded rows and, where they apply, on records as received."""
    _AS_RECORDS["on"] = request.param == "records"


def _vec(values: object) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).reshape(D)


def _ts(seconds: int) -> pd.Timestamp:
    return pd.Timestamp(seconds, unit="s", tz="UTC")


def _pair(z: object, ca: int = NOW - 10, version: str = V) -> Row:
    return {USER_ID: USER, ITEM_ID: ITEM, Z: _vec(z), FM_VERSION: version, EVENT_TS: _ts(ca)}


def _nbr(top1: object, mean: object = None, ca: int = NOW - 10, version: str = V) -> Row:
    return {
        USER_ID: USER,
        ITEM_ID: ITEM,
        Z_TOP1: _vec(top1),
        Z_MEAN: _vec(top1 if mean is None else mean),
        SRC_USER: 7,
        SIMILARITY: 0.5,
        N_NBRS: 3,
        FM_VERSION: version,
        EVENT_TS: _ts(ca),
    }


def _uagg(
    z_sum: object,
    count: int,
    window_start: int = NOW - 24 * H,
    ca: int = NOW - 5,
    version: str = V,
) -> Row:
    return {
        USER_ID: USER,
        Z_SUM: _vec(z_sum),
        COUNT: count,
        WINDOW_START: window_start,
        FM_VERSION: version,
        EVENT_TS: _ts(ca),
    }


def _iagg(z_mean: object, count: int = 3, ca: int = NOW - 10, version: str = V) -> Row:
    return {
        ITEM_ID: ITEM,
        Z_MEAN: _vec(z_mean),
        COUNT: count,
        FM_VERSION: version,
        EVENT_TS: _ts(ca),
    }


def _view_rows(name: str, rows: Sequence[Row | None]) -> ViewRows:
    """``rows`` of view ``name`` written and read back through the record codec; ``None`` is
    a row the store does not hold."""
    spec = SPECS[name]
    params = spec.params(CFG)
    present = [r for r in rows if r is not None]
    if not present:
        return ViewRows.empty(spec, params, len(rows))
    frame = pd.DataFrame(present)
    # Rows the write contract refuses (a count of 0, a window that starts after its end)
    # reach Redis only around the store: validated with legal values, then given back
    # their own, as a raw write would store them.
    raw = {c: frame[c].to_numpy() for c in (COUNT, WINDOW_START) if c in frame}
    legal = frame.assign(**{c: 1 for c in raw if c == COUNT})
    if WINDOW_START in raw:
        legal[WINDOW_START] = 0
    table = codec.normalize(spec, params, legal)
    for name_, values in raw.items():
        table = table.set_column(
            table.schema.get_field_index(name_), name_, pa.array(values, pa.int64())
        )
    encoded = codec.encode_records(spec, params, table)
    if _AS_RECORDS["on"] and len(present) == len(rows) and len(set(map(len, encoded))) == 1:
        uniform = np.frombuffer(b"".join(encoded), f"V{len(encoded[0])}")
        out = codec.decode_uniform(spec, params, uniform)
        assert isinstance(out, codec.RecordRows)
        return out
    records = iter(encoded)
    replies = [next(records) if r is not None else None for r in rows]
    return codec.decode_records(spec, params, replies)


def _row(**views: Row) -> dict[str, Row | None]:
    """One request row: each view's row where given, none otherwise."""
    unknown = set(views) - set(TIERS)
    assert not unknown, unknown
    return {name: views.get(name) for name in TIERS}


def _views(*rows: Mapping[str, Row | None]) -> dict[str, ViewRows]:
    """The four views' rows for the request rows ``rows``, in order."""
    return {name: _view_rows(name, [r[name] for r in rows]) for name in TIERS}


def _one(**views: Row) -> dict[str, ViewRows]:
    return _views(_row(**views))


# -- freshness ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "present"),
    [(0, True), (6 * H, True), (6 * H + 1, False), (-1, False)],
    ids=["now", "exactly-ttl", "ttl-plus-1s", "computed-after-now"],
)
def test_pair_ttl_is_inclusive_and_future_rows_are_unused(age: int, present: bool) -> None:
    out = assemble_tiers(_one(pair=_pair([1, 2, 3, 4], ca=NOW - age)), NOW, **KW)
    assert out.mask[0, 0] == present
    expected = np.array([1, 2, 3, 4], np.float32) if present else np.zeros(D, np.float32)
    np.testing.assert_array_equal(out.tier_z[0, 0], expected)
    assert out.tier[0] == ("pair" if present else "none")


@pytest.mark.parametrize("view", ["uagg", "iagg"])
@pytest.mark.parametrize(
    ("age", "present"),
    [(0, True), (24 * H, True), (24 * H + 1, False), (-1, False)],
    ids=["now", "exactly-ttl", "ttl-plus-1s", "computed-after-now"],
)
def test_aggregate_ttls_are_inclusive_and_future_rows_are_unused(
    view: str, age: int, present: bool
) -> None:
    ca = NOW - age
    row = {
        "uagg": _uagg([4, 4, 4, 4], 2, window_start=ca - 24 * H, ca=ca),
        "iagg": _iagg([1] * 4, ca=ca),
    }[view]
    out = assemble_tiers(_one(**{view: row}), NOW, **KW)
    k = TIERS.index(view)
    assert out.mask[0, k] == present
    expected = [2] * 4 if view == "uagg" else [1] * 4
    np.testing.assert_array_equal(out.tier_z[0, k], expected if present else [0] * 4)


def test_nbr_uses_its_own_ttl() -> None:
    kw = {**KW, "nbr_ttl_s": 2 * H}
    fresh = assemble_tiers(_one(nbr=_nbr([1] * 4, ca=NOW - 2 * H)), NOW, **kw)
    stale = assemble_tiers(_one(nbr=_nbr([1] * 4, ca=NOW - 2 * H - 1)), NOW, **kw)
    future = assemble_tiers(_one(nbr=_nbr([1] * 4, ca=NOW + 1)), NOW, **kw)
    assert fresh.mask[0, 1] and not stale.mask[0, 1] and not future.mask[0, 1]
    # The pair TTL (6 h) does not apply to nbr rows.
    pair_age = assemble_tiers(_one(nbr=_nbr([1] * 4, ca=NOW - 3 * H)), NOW, **kw)
    assert not pair_age.mask[0, 1]
    wide = assemble_tiers(
        _one(nbr=_nbr([1] * 4, ca=NOW - 8 * H)), NOW, **{**KW, "nbr_ttl_s": 8 * H}
    )
    assert wide.mask[0, 1] and wide.tier[0] == "nbr"


def test_per_row_now_array() -> None:
    row = _row(pair=_pair([1] * 4, ca=100))
    out = assemble_tiers(_views(row, row, row), np.array([100 + 6 * H, 99, 100]), **KW)
    assert out.mask[:, 0].tolist() == [True, False, True]
    assert out.tier.tolist() == ["pair", "none", "pair"]


# -- version, dimension and missing rows -------------------------------------------------------


def test_wrong_version_is_missing_in_every_tier() -> None:
    def everything(version: str) -> dict[str, Row | None]:
        return _row(
            pair=_pair([1] * 4, version=version),
            nbr=_nbr([1] * 4, version=version),
            uagg=_uagg([2] * 4, 2, version=version),
            iagg=_iagg([1] * 4, version=version),
        )

    # Versions of the same and of another length than the expected one, in one batch.
    out = assemble_tiers(_views(everything("fm-0"), everything(V), everything("fm-10")), NOW, **KW)
    assert out.mask.tolist() == [[False] * 4, [True] * 4, [False] * 4]
    assert out.tier.tolist() == ["none", "pair", "none"]
    assert not out.features[[0, 2]].any()
    assert out.features[1].all()


def test_records_of_another_z_dim_are_missing_in_every_tier() -> None:
    other = SolarisConfig(model=ModelConfig(z_dim=2))
    rows = {
        "pair": {**_pair([1] * 4), Z: np.ones(2, np.float32)},
        "nbr": {**_nbr([1] * 4), Z_TOP1: np.ones(2, np.float32), Z_MEAN: np.ones(2, np.float32)},
        "uagg": {**_uagg([2] * 4, 2), Z_SUM: np.ones(2, np.float32)},
        "iagg": {**_iagg([1] * 4), Z_MEAN: np.ones(2, np.float32)},
    }
    replies = {
        name: codec.encode_records(
            SPECS[name],
            SPECS[name].params(other),
            codec.normalize(SPECS[name], SPECS[name].params(other), pd.DataFrame([row])),
        )
        for name, row in rows.items()
    }
    views = {
        name: codec.decode_records(SPECS[name], SPECS[name].params(CFG), replies[name])
        for name in TIERS
    }
    out = assemble_tiers(views, NOW, **KW)
    assert not out.mask.any()
    assert out.tier[0] == "none"
    assert not out.features.any()


def test_missing_rows_are_missing() -> None:
    full = _row(pair=_pair([1] * 4), nbr=_nbr([2] * 4), uagg=_uagg([6] * 4, 3), iagg=_iagg([4] * 4))
    out = assemble_tiers(_views(full, _row(), full), NOW, **KW)
    assert out.mask.tolist() == [[True] * 4, [False] * 4, [True] * 4]
    assert out.tier.tolist() == ["pair", "none", "pair"]
    assert not out.features[1].any()
    np.testing.assert_array_equal(out.features[0], out.features[2])


def test_views_without_any_row_are_missing() -> None:
    views = {name: ViewRows.empty(SPECS[name], SPECS[name].params(CFG), 2) for name in TIERS}
    out = assemble_tiers(views, NOW, **KW)
    assert not out.mask.any() and not out.features.any()
    assert out.tier.tolist() == ["none", "none"]


def test_iagg_with_no_users_is_missing() -> None:
    out = assemble_tiers(
        _views(_row(iagg=_iagg([1] * 4, count=0)), _row(iagg=_iagg([1] * 4, count=1))),
        NOW,
        **KW,
    )
    assert out.mask[:, 3].tolist() == [False, True]
    assert out.tier.tolist() == ["none", "iagg"]
    assert not out.tier_z[0, 3].any()


def test_uagg_with_a_zero_count_is_missing() -> None:
    rows = [_row(uagg=_uagg([0] * 4, c)) for c in (0, 1)]
    out = assemble_tiers(_views(*rows), NOW, **KW)
    assert out.mask[:, 2].tolist() == [False, True]
    assert not out.tier_z[:1, 2].any()


# -- user aggregate without the current item -------------------------------------------------


def test_uagg_excludes_the_current_item_when_its_pair_is_in_the_window() -> None:
    others = np.array([[1, 2, 3, 4], [3, 2, 1, 0.5]], np.float32)
    own = np.array([10, -10, 0.25, 8], np.float32)
    z_sum = others.sum(0) + own
    views = _one(pair=_pair(own, ca=NOW - 100), uagg=_uagg(z_sum, 3, ca=NOW - 5))
    out = assemble_tiers(views, NOW, **KW)
    np.testing.assert_allclose(out.tier_z[0, 2], others.mean(0), rtol=1e-6)
    assert out.tier[0] == "pair"

    # The pair is older than its serving TTL (not a hit) but still inside the 24 h window,
    # hence still counted in the sum: it must still be removed.
    old = _one(pair=_pair(own, ca=NOW - 10 * H), uagg=_uagg(z_sum, 3, ca=NOW - 5))
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
    views = _one(pair=_pair([100] * 4, ca=pair_ca), uagg=_uagg(z_sum, 3, ca=NOW - 5))
    out = assemble_tiers(views, NOW, **KW)
    assert out.mask[0, 2]
    np.testing.assert_allclose(out.tier_z[0, 2], z_sum / 3)


def test_uagg_whose_window_starts_after_its_end_is_never_used() -> None:
    """The drill's leak: such a row put the pair outside the window, so its own code was
    served back through the user aggregate."""
    own = np.array([10, -10, 0.25, 8], np.float32)
    bad = _uagg(own + 1, 2, window_start=NOW, ca=NOW - 5)  # starts 5 s after its end
    out = assemble_tiers(_one(pair=_pair(own, ca=NOW - 100), uagg=bad), NOW, **KW)
    assert out.mask[0].tolist() == [True, False, False, False]
    assert not out.tier_z[0, 2].any()


def test_uagg_plain_mean_when_the_pair_has_another_version() -> None:
    z_sum = np.array([6, 6, 6, 6], np.float32)
    views = _one(pair=_pair([100] * 4, version="fm-0"), uagg=_uagg(z_sum, 3))
    out = assemble_tiers(views, NOW, **KW)
    assert out.mask[0].tolist() == [False, False, True, False]
    np.testing.assert_allclose(out.tier_z[0, 2], z_sum / 3)


def test_uagg_plain_mean_when_there_is_no_pair_row() -> None:
    z_sum = np.array([6, 6, 6, 6], np.float32)
    out = assemble_tiers(_one(uagg=_uagg(z_sum, 3)), NOW, **KW)
    assert out.tier[0] == "uagg"
    np.testing.assert_allclose(out.tier_z[0, 2], z_sum / 3)


def test_uagg_with_only_the_current_item_is_missing() -> None:
    own = [1, 2, 3, 4]
    out = assemble_tiers(_one(pair=_pair(own), uagg=_uagg(own, 1)), NOW, **KW)
    assert out.mask[0].tolist() == [True, False, False, False]
    assert not out.tier_z[0, 2].any()


# -- precedence, strategy, shapes ---------------------------------------------------------------


def test_tier_precedence_pair_nbr_uagg_iagg_none() -> None:
    p, nb, u, i = _pair([1] * 4), _nbr([2] * 4), _uagg([4] * 4, 2), _iagg([4] * 4)
    views = _views(
        _row(pair=p, nbr=nb, uagg=u, iagg=i),
        _row(nbr=nb, uagg=u, iagg=i),
        _row(uagg=u, iagg=i),
        _row(iagg=i),
        _row(),
    )
    out = assemble_tiers(views, NOW, **KW)
    assert out.tier.tolist() == ["pair", "nbr", "uagg", "iagg", "none"]
    assert out.mask.sum(1).tolist() == [4, 3, 2, 1, 0]
    assert out.counts() == {"pair": 1, "nbr": 1, "uagg": 1, "iagg": 1, "none": 1}
    np.testing.assert_array_equal(out.tier_z[0, :, 0], [1, 2, 3, 4])  # uagg: (4 - 1) / 1
    np.testing.assert_array_equal(out.tier_z[2, 2], [2] * 4)  # no pair: 4 / 2
    assert out.features.shape == (5, 4 * D) and out.features.dtype == np.float32
    assert np.shares_memory(out.tier_z, out.features)


def test_a_lower_tier_is_used_when_the_higher_ones_are_stale_or_of_another_version() -> None:
    views = _one(
        pair=_pair([1] * 4, ca=NOW - 6 * H - 1),
        nbr=_nbr([2] * 4, version="fm-0"),
        iagg=_iagg([4] * 4),
    )
    out = assemble_tiers(views, NOW, **KW)
    assert out.mask[0].tolist() == [False, False, False, True]
    assert out.tier[0] == "iagg"
    np.testing.assert_array_equal(out.tier_z[0, 3], [4] * 4)


def test_nbr_strategy_chooses_the_vector() -> None:
    views = _one(nbr=_nbr([1] * 4, mean=[2] * 4))
    top1 = assemble_tiers(views, NOW, **KW, nbr_strategy="top1")
    weighted = assemble_tiers(views, NOW, **KW, nbr_strategy="weighted")
    default = assemble_tiers(views, NOW, **KW)
    np.testing.assert_array_equal(top1.tier_z[0, 1], [1] * 4)
    np.testing.assert_array_equal(weighted.tier_z[0, 1], [2] * 4)
    np.testing.assert_array_equal(default.features, top1.features)
    assert top1.tier[0] == weighted.tier[0] == "nbr"
    with pytest.raises(ValueError, match="nbr_strategy"):
        assemble_tiers(views, NOW, **KW, nbr_strategy="mean")


def test_vectors_are_served_at_their_stored_precision() -> None:
    z = np.array([0.1, 1 / 3, -2.7, 1e-5], np.float32)
    views = _views(_row(pair=_pair(z), nbr=_nbr(z)), _row(uagg=_uagg(z, 1), iagg=_iagg(z)))
    out = assemble_tiers(views, NOW, **KW)
    assert out.mask.tolist() == [[True, True, False, False], [False, False, True, True]]
    np.testing.assert_array_equal(out.tier_z[0, 0], codec.f16_round(z))
    np.testing.assert_array_equal(out.tier_z[0, 1], codec.f16_round(z))
    np.testing.assert_array_equal(out.tier_z[1, 2], z)
    np.testing.assert_array_equal(out.tier_z[1, 3], z)
    assert not np.array_equal(codec.f16_round(z), z)


def test_empty_input_and_empty_tiers() -> None:
    out = assemble_tiers(_views(), NOW, **KW)
    assert out.features.shape == (0, 4 * D) and out.mask.shape == (0, 4) and len(out.tier) == 0
    assert out.counts() == {"pair": 0, "nbr": 0, "uagg": 0, "iagg": 0, "none": 0}
    e = empty_tiers(3, D)
    assert not e.features.any() and not e.mask.any() and e.tier.tolist() == ["none"] * 3
    assert e.tier_z.shape == (3, 4, D)
    with pytest.raises(ValueError, match="z_dim"):
        empty_tiers(1, 0)


def test_extra_views_are_ignored() -> None:
    views = _one(pair=_pair([1] * 4))
    extra = {**views, "unn": ViewRows(np.zeros(7, bool), np.zeros(7, np.int64), {})}
    out = assemble_tiers(extra, NOW, **KW)
    np.testing.assert_array_equal(out.features, assemble_tiers(views, NOW, **KW).features)


def test_tier_settings_are_the_views_read_ttls() -> None:
    cfg = SolarisConfig(model=ModelConfig(z_dim=D))
    settings = tier_settings(cfg)
    assert settings == {
        "z_dim": D,
        "pair_ttl_s": PAIR.params(cfg).read_ttl_s,
        "nbr_ttl_s": NBR.params(cfg).read_ttl_s,
        "uagg_ttl_s": UAGG.params(cfg).read_ttl_s,
        "iagg_ttl_s": IAGG.params(cfg).read_ttl_s,
        "nbr_strategy": cfg.store.nbr_strategy,
    }
    out = assemble_tiers(_one(pair=_pair([1] * 4)), NOW, fm_version=V, **settings)
    assert out.tier[0] == "pair"


def test_bad_inputs_raise() -> None:
    views = _views(_row(), _row())
    with pytest.raises(ValueError, match="missing"):
        assemble_tiers({"pair": views["pair"]}, NOW, **KW)
    with pytest.raises(ValueError, match="different lengths"):
        assemble_tiers({**views, "nbr": _view_rows("nbr", [None])}, NOW, **KW)
    with pytest.raises(ValueError, match="now"):
        assemble_tiers(views, np.array([1, 2, 3]), **KW)
    with pytest.raises(ValueError, match="now"):
        assemble_tiers(views, np.array([[NOW, NOW]]), **KW)
    with pytest.raises(ValueError, match="now"):
        assemble_tiers(views, float("nan"), **KW)
    with pytest.raises(ValueError, match="now"):
        assemble_tiers(views, np.array([NOW, np.inf]), **KW)
    with pytest.raises(ValueError, match="now"):
        assemble_tiers(views, np.array(["a", "b"]), **KW)
    # The one rule of a request time: milliseconds and booleans are refused here too.
    with pytest.raises(ValueError, match=r"now must be epoch seconds in .* at row 1"):
        assemble_tiers(views, np.array([NOW, 1_700_000_000_000]), **KW)
    with pytest.raises(ValueError, match=r"now must be epoch seconds in"):
        assemble_tiers(views, 1_700_000_000_000, **KW)
    with pytest.raises(ValueError, match=r"now must be epoch seconds \(numbers\), got True"):
        assemble_tiers(views, True, **KW)
    for ttl in ("pair_ttl_s", "nbr_ttl_s", "uagg_ttl_s", "iagg_ttl_s"):
        for bad in (0, -1, float("nan")):
            with pytest.raises(ValueError, match=ttl):
                assemble_tiers(views, NOW, **{**KW, ttl: bad})
    with pytest.raises(ValueError, match="nbr_strategy"):
        assemble_tiers(views, NOW, **KW, nbr_strategy="mean")
    for version in ("", None):
        with pytest.raises(ValueError, match="fm_version"):
            assemble_tiers(views, NOW, **{**KW, "fm_version": version})


# -- mean_excluding ----------------------------------------------------------------------------


def _f32(values: list[list[float]]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def test_mean_excluding_matches_hand_computation() -> None:
    z_sum = _f32([[6, 9], [6, 9], [3, 3], [0, 0], [0, 0], [5, -5]])
    count = np.array([3, 3, 1, 0, 0, 1])
    z_pair = _f32([[1, 0], [1, 0], [3, 3], [0, 0], [0, 0], [9, 9]])
    in_window = np.array([True, False, True, False, True, False])
    mean, valid = mean_excluding(z_sum, count, z_pair, in_window)
    assert mean.dtype == np.float32
    np.testing.assert_allclose(
        mean, [[2.5, 4.5], [2, 3], [0, 0], [0, 0], [0, 0], [5, -5]], rtol=0, atol=1e-7
    )
    # count 1 with the pair in window (nothing else) and count 0 are invalid.
    assert valid.tolist() == [True, True, False, False, False, True]


def test_mean_excluding_ignores_the_pair_code_when_not_in_window() -> None:
    mean, valid = mean_excluding(
        _f32([[4, 2]]), np.array([2]), _f32([[np.nan, np.nan]]), np.array([False])
    )
    np.testing.assert_array_equal(mean, [[2, 1]])
    assert valid.tolist() == [True]


def test_mean_excluding_accepts_float16_pair_codes() -> None:
    z_pair = np.array([[1, 0.1]], np.float16)
    mean, valid = mean_excluding(_f32([[3, 2]]), np.array([2]), z_pair, np.array([True]))
    np.testing.assert_allclose(mean, [[2, 2 - np.float64(np.float16(0.1))]], rtol=1e-7)
    assert valid.tolist() == [True]


def test_mean_excluding_of_no_rows_is_empty() -> None:
    z = np.zeros((0, 3), np.float32)
    mean, valid = mean_excluding(z, np.zeros(0, np.int64), z, np.zeros(0, bool))
    assert mean.shape == (0, 3) and mean.dtype == np.float32 and valid.shape == (0,)


def test_mean_excluding_after_float16_round_trip_equals_mean_of_other_items() -> None:
    rng = np.random.default_rng(0)
    n_items, d = 9, 16
    z = rng.standard_normal((n_items, d)).astype(np.float32) * 0.37
    pairs = pd.DataFrame(
        {
            "user_id": np.ones(n_items, np.int64),
            "item_id": np.arange(n_items, dtype=np.int64),
            "computed_at": NOW - np.arange(n_items, dtype=np.int64),
            "fm_version": [V] * n_items,
        }
    )
    uagg = user_aggregate(pairs, z, as_of=NOW, window_seconds=24 * H, fm_version=V)
    z_sum = np.repeat(np.stack(uagg["z_sum"]), n_items, axis=0)  # one row per current item
    count = np.repeat(uagg["count"].to_numpy(), n_items)
    z_pair = codec.f16_round(z)  # what the pair view serves

    mean, valid = mean_excluding(z_sum, count, z_pair, np.ones(n_items, dtype=bool))

    z16 = codec.f16_round(z).astype(np.float64)
    others = (z16.sum(axis=0)[None, :] - z16) / (n_items - 1)
    assert valid.all()
    np.testing.assert_allclose(mean, others, rtol=0, atol=1e-6)


def test_mean_excluding_rejects_inconsistent_shapes_and_dtypes() -> None:
    s, c, p, w = _f32([[1, 1]]), np.array([2]), _f32([[1, 1]]), np.array([True])
    with pytest.raises(ValueError, match="z_pair"):
        mean_excluding(s, c, _f32([[1, 1, 1]]), w)
    with pytest.raises(ValueError, match="shape"):
        mean_excluding(s, np.array([2, 2]), p, w)
    with pytest.raises(ValueError, match="shape"):
        mean_excluding(s, c, p, np.array([True, False]))
    with pytest.raises(ValueError, match="bool"):
        mean_excluding(s, c, p, np.array([1]))
    with pytest.raises(ValueError, match="integers"):
        mean_excluding(s, np.array([2.0]), p, w)
    with pytest.raises(ValueError, match=">= 0"):
        mean_excluding(s, np.array([-1]), p, w)
    with pytest.raises(ValueError, match="2-D"):
        mean_excluding(np.ones(2, np.float32), c, p, w)


@pytest.mark.parametrize("uagg", [_uagg([4, 4, 4, 4], 3), _uagg([4, 4, 4, 4], 3, version="fm-0")])
def test_one_uagg_row_stands_for_every_candidate(uagg: Row) -> None:
    """The request path reads the user's aggregate once: one row gives what the row
    repeated for every candidate gives, pair in and out of the window, tiers missing too."""
    rows = [
        _row(pair=_pair([1, 2, 3, 4]), uagg=uagg),
        _row(pair=_pair([1, 2, 3, 4], ca=NOW - 30 * H), uagg=uagg),  # out of the window
        _row(nbr=_nbr([5, 5, 5, 5]), uagg=uagg),
        _row(uagg=uagg, iagg=_iagg([6, 6, 6, 6])),
    ]
    repeated = _views(*rows)
    once = {**repeated, UAGG.name: _view_rows(UAGG.name, [uagg])}
    a, b = assemble_tiers(repeated, NOW, **KW), assemble_tiers(once, NOW, **KW)
    np.testing.assert_array_equal(a.features, b.features)
    np.testing.assert_array_equal(a.mask, b.mask)
    assert a.tier.tolist() == b.tier.tolist()


def test_a_uagg_row_of_another_length_than_one_or_n_is_refused() -> None:
    views = _views(_row(pair=_pair([1, 2, 3, 4])), _row(pair=_pair([1, 2, 3, 4])))
    views[UAGG.name] = _view_rows(UAGG.name, [None, None, None])
    with pytest.raises(ValueError, match="different lengths"):
        assemble_tiers(views, NOW, **KW)


def test_a_prepared_assembly_gives_assemble_tiers_answer_request_after_request() -> None:
    """``TierAssembly`` (what a serving client keeps) checks its settings once and answers
    each request as ``assemble_tiers`` does, whichever path the rows take."""
    assembly = TierAssembly(**KW)  # type: ignore[arg-type]
    requests = [
        _views(_row(pair=_pair([1] * 4)), _row()),
        _views(_row(), _row(pair=_pair([2] * 4))),
        _views(_row(pair=_pair([3] * 4))),
    ]
    for views in [*requests, *requests]:
        got, want = assembly(views, NOW), assemble_tiers(views, NOW, **KW)
        np.testing.assert_array_equal(got.features, want.features)
        np.testing.assert_array_equal(got.mask, want.mask)
        assert got.tier.tolist() == want.tier.tolist()
    for bad in ({"fm_version": ""}, {"pair_ttl_s": 0}, {"nbr_strategy": "mean"}):
        with pytest.raises(TierInputError, match=next(iter(bad))):
            TierAssembly(**{**KW, **bad})  # type: ignore[arg-type]
