"""Shared fixtures for the model tests: a small ``FeatureSpec`` and random batches."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from solaris.examples.movielens.models.batch import FeatureBatch, FeatureSpec

MakeBatch = Callable[..., FeatureBatch]


def _padded_ids(
    rows: int, width: int, vocab: int, generator: torch.Generator, min_len: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[rows, width]`` ids in ``1..vocab-1`` with a random-length padded tail, and lengths."""
    ids = torch.randint(1, vocab, (rows, width), generator=generator)
    lengths = torch.randint(min_len, width + 1, (rows,), generator=generator)
    pad = torch.arange(width).unsqueeze(0) >= lengths.unsqueeze(1)
    return ids.masked_fill(pad, 0), lengths


def _categorical(
    rows: int, cardinalities: tuple[int, ...], generator: torch.Generator
) -> torch.Tensor:
    """``[rows, len(cardinalities)]`` ids, column ``i`` in ``0..cardinalities[i]-1``."""
    columns = [torch.randint(0, c, (rows,), generator=generator) for c in cardinalities]
    return torch.stack(columns, dim=1) if columns else torch.zeros(rows, 0, dtype=torch.long)


def random_batch(spec: FeatureSpec, batch_size: int = 8, seed: int = 0) -> FeatureBatch:
    """A valid random ``FeatureBatch`` for ``spec`` (padding at the tail of list fields)."""
    g = torch.Generator().manual_seed(seed)
    hist_items, _ = _padded_ids(batch_size, spec.history_len, spec.n_items, g)
    hist_ratings = torch.randint(1, 6, hist_items.shape, generator=g).masked_fill(
        hist_items == 0, 0
    )
    genres, _ = _padded_ids(batch_size, spec.genres_per_item, spec.n_genres, g, min_len=1)
    kg, _ = _padded_ids(batch_size, spec.kg_per_item, spec.kg_buckets, g)
    return FeatureBatch(
        dense=torch.randn(batch_size, spec.n_dense, generator=g),
        user_cat=_categorical(batch_size, spec.user_cat_cardinalities, g),
        item_id=torch.randint(1, spec.n_items, (batch_size,), generator=g),
        item_cat=_categorical(batch_size, spec.item_cat_cardinalities, g),
        genres=genres,
        kg=kg,
        hist_items=hist_items,
        hist_ratings=hist_ratings,
    )


@pytest.fixture
def spec() -> FeatureSpec:
    return FeatureSpec(
        n_dense=5,
        user_cat_cardinalities=(3, 8, 22),
        n_items=40,
        item_cat_cardinalities=(6,),
        n_genres=19,
        kg_buckets=64,
        history_len=7,
        genres_per_item=4,
        kg_per_item=6,
    )


@pytest.fixture
def make_batch(spec: FeatureSpec) -> MakeBatch:
    """``make_batch(batch_size=8, seed=0, spec=None)`` -> a random ``FeatureBatch``.

    ``spec`` defaults to the ``spec`` fixture.
    """

    def make(batch_size: int = 8, seed: int = 0, spec: FeatureSpec = spec) -> FeatureBatch:
        return random_batch(spec, batch_size=batch_size, seed=seed)

    return make
