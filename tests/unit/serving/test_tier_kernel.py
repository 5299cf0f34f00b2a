"""The compiled tier assembly (``solaris.serving.tier_kernel``) gives, bit for bit, what the
rules written with numpy give: on decoded rows (training's path) and on records as received
(the request path), over random rows that cross every TTL edge, version, window and count
case, float16 specials included; and ``load_assembly`` compiles the request path's layout
before any request does."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from solaris.serving import tier_kernel, tiers
from solaris.serving.tiers import TIERS, assemble_tiers, load_assembly
from solaris.store import codec
from solaris.store.codec import RecordRows, ViewRows
from solaris.store.contract import (
    COMPUTED_AT,
    COUNT,
    FM_VERSION,
    IAGG,
    NBR,
    PAIR,
    UAGG,
    WINDOW_START,
    Z_MEAN,
    Z_SUM,
    Z_TOP1,
    ViewParams,
    ViewSpec,
    Z,
)

D = 8
VERSION = "ae-0123456789ab"  # 15 bytes: one 8-byte word and 7 more
NOW = 1_700_000_000
TTLS = {"pair_ttl_s": 6 * 3600, "nbr_ttl_s": 6 * 3600, "uagg_ttl_s": 86_400, "iagg_ttl_s": 3600}
PARAMS = ViewParams(D, 1, 1)
SPECS: dict[str, ViewSpec] = {spec.name: spec for spec in (PAIR, NBR, UAGG, IAGG)}
_US = 1_000_000


# -- the rules written with numpy (the implementation the compiled loop replaced) ----------


def _fresh(rows: ViewRows, now: np.ndarray | float, ttl: float) -> np.ndarray:
    now_us = np.multiply(now, _US)
    return rows.found & (rows.event_us <= now_us) & (rows.event_us >= now_us - ttl * _US)


def numpy_tiers(views: dict[str, ViewRows], now: np.ndarray | float, strategy: str) -> tuple:
    pair, nbr, uagg, iagg = (views[name] for name in TIERS)
    version = VERSION.encode()
    n = len(pair)
    pair_known = pair.found & (pair.values[FM_VERSION] == version)
    pair_ok = pair_known & _fresh(pair, now, TTLS["pair_ttl_s"])
    nbr_ok = (nbr.values[FM_VERSION] == version) & _fresh(nbr, now, TTLS["nbr_ttl_s"])
    count = uagg.values[COUNT]
    uagg_row = (
        (count >= 0)
        & (uagg.values[WINDOW_START] <= uagg.values[COMPUTED_AT])
        & (uagg.values[FM_VERSION] == version)
        & _fresh(uagg, now, TTLS["uagg_ttl_s"])
    )
    pair_z = pair.values[Z].astype(np.float32)
    pair_ca = pair.values[COMPUTED_AT]
    in_window = (
        uagg_row
        & pair_known
        & (pair_ca > uagg.values[WINDOW_START])
        & (pair_ca <= uagg.values[COMPUTED_AT])
    )
    effective = np.where(uagg_row, count, 0) - in_window
    uagg_ok = np.broadcast_to(effective > 0, (n,))
    numerator = uagg.values[Z_SUM].astype(np.float64) - np.where(in_window[:, None], pair_z, 0)
    mean = np.divide(numerator, np.maximum(effective, 1)[:, None], dtype=np.float64)
    user_z = np.where(uagg_ok[:, None], mean.astype(np.float32), 0)
    iagg_ok = (
        (iagg.values[COUNT] > 0)
        & (iagg.values[FM_VERSION] == version)
        & _fresh(iagg, now, TTLS["iagg_ttl_s"])
    )
    nbr_field = Z_TOP1 if strategy == "top1" else Z_MEAN
    blocks = {
        "pair": (pair_ok, pair_z),
        "nbr": (nbr_ok, nbr.values[nbr_field].astype(np.float32)),
        "uagg": (uagg_ok, user_z),
        "iagg": (iagg_ok, iagg.values[Z_MEAN]),
    }
    features = np.zeros((n, len(TIERS) * D), np.float32)
    mask = np.zeros((n, len(TIERS)), bool)
    for k, name in enumerate(TIERS):
        ok, z = blocks[name]
        mask[:, k] = ok
        features[:, k * D : (k + 1) * D] = np.where(ok[:, None], z, 0)
    first = np.where(mask.any(1), mask.argmax(1), len(TIERS))
    return features, mask, np.array([*TIERS, "none"], object)[first]


# -- random rows -----------------------------------------------------------------------------


def _codes(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float16 codes with specials: ±0, subnormals, ±inf, NaN, the largest finite."""
    z = rng.standard_normal(shape).astype(np.float16)
    specials = np.array([0.0, -0.0, 6e-8, -3e-6, np.inf, -np.inf, np.nan, 65504.0], np.float16)
    pick = rng.random(shape) < 0.05
    z[pick] = rng.choice(specials, pick.sum())
    return z


def _times(rng: np.random.Generator, n: int, ttl: int) -> np.ndarray:
    """Event times in microseconds at and around both TTL edges and elsewhere."""
    edges = np.array([0, -1, 1, ttl * _US, ttl * _US + 1, ttl * _US - 1, -_US, ttl * _US // 2])
    return NOW * _US - rng.choice(edges, n)


def _records(rng: np.random.Generator, spec: ViewSpec, n: int, version: str) -> np.ndarray:
    """``n`` records of ``spec`` (``V<L>``), random fields, every one with ``version``."""
    tail = len(version.encode())
    rec = np.zeros(n, codec._fixed_dtype(spec, D, tail))
    ttl = {"pair": 6 * 3600, "nbr": 6 * 3600, "uagg": 86_400, "iagg": 3600}[spec.name]
    rec["__event_us"] = _times(rng, n, ttl)
    rec[FM_VERSION] = version.encode()
    names = rec.dtype.names or ()
    for name in names:
        kind = rec.dtype[name]
        if name in (Z, Z_TOP1) or (name == Z_MEAN and spec is NBR):
            rec[name] = _codes(rng, (n, D))
        elif name in (Z_SUM, Z_MEAN):
            rec[name] = rng.standard_normal((n, D)).astype(np.float32) * 4
        elif name == COUNT:
            rec[name] = rng.choice([-1, 0, 1, 2, 7], n)
        elif name == WINDOW_START:
            # around the aggregate's own time and the pairs' times; some start after the end
            rec[name] = NOW - rng.choice([0, 3600, 7 * 3600, 86_400, -5], n)
        elif kind == np.int64 and name != "__event_us":
            rec[name] = rng.integers(0, 100, n)
        elif kind == np.float32:
            rec[name] = rng.random(n).astype(np.float32)
    raw: np.ndarray = rec.view(f"V{rec.dtype.itemsize}")
    return raw


def _decoded(spec: ViewSpec, records: np.ndarray, found: np.ndarray) -> ViewRows:
    """Through the general decoder, as replies with a nil where ``found`` is False."""
    replies = [r.tobytes() if ok else None for r, ok in zip(records, found, strict=True)]
    return codec.decode_records(spec, PARAMS, replies)


def _assemble(views: dict[str, ViewRows], now: object, strategy: str) -> tuple:
    out = assemble_tiers(views, now, z_dim=D, fm_version=VERSION, nbr_strategy=strategy, **TTLS)
    return out.features, out.mask, out.tier


def _same(got: tuple, want: tuple) -> None:
    np.testing.assert_array_equal(got[0].view(np.uint32), want[0].view(np.uint32))
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2].tolist() == want[2].tolist()


# -- tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("strategy", ["top1", "weighted"])
def test_request_path_records_give_the_numpy_rules_bit_for_bit(seed: int, strategy: str) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    other = "ae-ffffffffffff"  # another version of the same length: a miss, same layout
    raw = {
        name: _records(rng, spec, 1 if spec is UAGG else n, VERSION) for name, spec in SPECS.items()
    }
    for name, records in raw.items():  # some rows of another version
        wrong = rng.random(len(records)) < 0.1
        if wrong.any():
            patched = _records(rng, SPECS[name], int(wrong.sum()), other)
            records[wrong] = patched
    if seed % 2 == 0:  # the user's row usable: a window a day long, built a second ago
        user = raw["uagg"].view(codec._fixed_dtype(UAGG, D, len(VERSION)))
        user[COUNT], user[WINDOW_START], user["__event_us"] = 7, NOW - 86_400, NOW * _US - 1
        user[FM_VERSION] = VERSION.encode()
    records = {name: RecordRows(SPECS[name], PARAMS, r) for name, r in raw.items()}
    decoded = {name: _decoded(SPECS[name], r, np.ones(len(r), bool)) for name, r in raw.items()}
    calls = []
    compiled = tier_kernel.records_kernel

    def counted_kernel(*layouts: object):  # type: ignore[no-untyped-def]
        kernel = compiled(*layouts)  # type: ignore[arg-type]

        def counted(*args: object) -> tuple:
            calls.append(1)
            return kernel(*args)  # type: ignore[no-any-return]

        return counted

    tier_kernel.records_kernel = counted_kernel  # type: ignore[assignment]
    try:
        got = _assemble(records, NOW, strategy)  # type: ignore[arg-type]
    finally:
        tier_kernel.records_kernel = compiled  # type: ignore[assignment]
    assert calls, "the request path's records were not assembled from the records"
    want = numpy_tiers(decoded, NOW, strategy)
    _same(got, want)
    if seed % 2 == 0:
        assert want[1][:, TIERS.index("uagg")].any()
    _same(_assemble(decoded, NOW, strategy), want)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(12))
def test_decoded_rows_give_the_numpy_rules_bit_for_bit(seed: int) -> None:
    """Training's path: missing rows, versions of other lengths (one with trailing NULs),
    a user row per row and one request time per row."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 300))
    views = {}
    for name, spec in SPECS.items():
        parts = [
            _records(rng, spec, n, version)
            for version in (VERSION, "ae-0123456789ab\0", "x", "ae-0123456789aX")
        ]
        choice = rng.choice(4, n, p=[0.7, 0.1, 0.1, 0.1])
        replies = [parts[c][i].tobytes() for i, c in enumerate(choice)]
        found = rng.random(n) < 0.8
        views[name] = codec.decode_records(
            spec, PARAMS, [r if ok else None for r, ok in zip(replies, found, strict=True)]
        )
    now = NOW - rng.choice([0, 1, 3600], n)
    strategy = "top1" if seed % 2 else "weighted"
    _same(_assemble(views, now, strategy), numpy_tiers(views, now, strategy))
    _same(_assemble(views, float(NOW), strategy), numpy_tiers(views, float(NOW), strategy))


def test_a_version_of_another_length_takes_the_general_path() -> None:
    """Records whose fm_version is not the expected one's length are misses; they are
    assembled from decoded rows, so no new layout is compiled at request time."""
    rng = np.random.default_rng(7)
    raw = {name: _records(rng, spec, 5, "v2") for name, spec in SPECS.items()}
    records = {name: RecordRows(SPECS[name], PARAMS, r) for name, r in raw.items()}
    before = tier_kernel.records_kernel.cache_info().misses
    features, mask, tier = _assemble(records, NOW, "top1")  # type: ignore[arg-type]
    assert tier_kernel.records_kernel.cache_info().misses == before
    assert not mask.any() and not features.any() and set(tier) == {"none"}


def test_one_assembly_follows_the_layout_of_each_request() -> None:
    """A kept :class:`~solaris.serving.tiers.TierAssembly` (a serving client's) reuses the
    last request's record layout only for records of that layout: requests whose views'
    versions change length between calls (all views, or one) get the numpy rules each
    time, as do equal settings in another object."""
    rng = np.random.default_rng(21)
    assembly = tiers.TierAssembly(z_dim=D, fm_version=VERSION, nbr_strategy="top1", **TTLS)
    other = {name: VERSION for name in SPECS}
    for versions, params in [
        (other, PARAMS),
        (other, PARAMS),
        (dict.fromkeys(SPECS, "v2"), PARAMS),
        (other, ViewParams(D, 1, 1)),
        ({**other, "iagg": "v2"}, PARAMS),
        ({**other, "pair": VERSION + "+"}, PARAMS),
        (other, PARAMS),
    ]:
        n = int(rng.integers(1, 40))
        raw = {name: _records(rng, spec, n, versions[name]) for name, spec in SPECS.items()}
        records = {name: RecordRows(SPECS[name], params, r) for name, r in raw.items()}
        decoded = {name: _decoded(SPECS[name], r, np.ones(n, bool)) for name, r in raw.items()}
        out = assembly(records, NOW)  # type: ignore[arg-type]
        _same((out.features, out.mask, out.tier), numpy_tiers(decoded, NOW, "top1"))


def test_record_rows_decode_on_first_use_as_the_general_decoder_does() -> None:
    rng = np.random.default_rng(3)
    for name, spec in SPECS.items():
        raw = _records(rng, spec, 6, VERSION)
        lazy = codec.decode_uniform(spec, PARAMS, raw)
        assert isinstance(lazy, RecordRows) and len(lazy) == 6
        eager = _decoded(spec, raw, np.ones(6, bool))
        np.testing.assert_array_equal(lazy.found, eager.found)
        np.testing.assert_array_equal(lazy.event_us, eager.event_us)
        assert lazy.values.keys() == eager.values.keys()
        for field, values in eager.values.items():
            np.testing.assert_array_equal(lazy.values[field], values, err_msg=f"{name}.{field}")


def test_load_assembly_compiles_the_request_layout_before_any_request() -> None:
    load_assembly(D, VERSION, "weighted")
    compiled = tier_kernel.records_kernel.cache_info()
    rng = np.random.default_rng(11)
    records = {
        name: RecordRows(
            SPECS[name], PARAMS, _records(rng, spec, 1 if spec is UAGG else 30, VERSION)
        )
        for name, spec in SPECS.items()
    }
    _assemble(records, NOW, "weighted")  # type: ignore[arg-type]
    after = tier_kernel.records_kernel.cache_info()
    assert after.misses == compiled.misses and after.hits > compiled.hits
    assert tiers.load_assembly is load_assembly


def test_float16_widening_is_numpys_for_every_bit_pattern() -> None:
    """The request path widens float16 codes by the CPU's instruction where it has one
    (x86 F16C, ARM) and by a table otherwise; either is numpy's conversion, bit for bit,
    for all 65,536 patterns (a signalling NaN may come out quieted: still a NaN)."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    want = bits.view(np.float16).astype(np.float32)
    got = _widen_all(bits)
    nan = np.isnan(want)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(got[nan]).all()


@njit
def _widen_all(bits):  # type: ignore[no-untyped-def]
    out = np.empty(len(bits), np.float32)
    for k in range(len(bits)):
        out[k] = tier_kernel._widened(bits, k)
    return out
