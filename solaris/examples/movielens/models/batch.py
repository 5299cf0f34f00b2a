"""The tensors the models read, and the vocabulary sizes that shape them.

``FeatureBatch`` is produced by ``solaris.examples.movielens.features`` from (user, item,
time) rows; every field is computed from data strictly before the row's time. Index 0 is padding or
"unknown" in every categorical field, so an unseen id never raises.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from solaris.models.checkpoints import register_init_dataclass

__all__ = ["FeatureBatch", "FeatureSpec"]


@register_init_dataclass  # checkpoints store a model's FeatureSpec with its weights
@dataclass(frozen=True)
class FeatureSpec:
    """Vocabulary sizes and widths; stored in checkpoints so a model can be rebuilt.

    Args:
        n_dense: number of continuous features in ``FeatureBatch.dense``.
        user_cat_cardinalities: vocab size of each column of ``user_cat`` (incl. 0).
        n_items: item vocab size (incl. 0).
        item_cat_cardinalities: vocab size of each column of ``item_cat`` (incl. 0).
        n_genres: genre vocab size (incl. padding 0).
        kg_buckets: hashed KG-entity vocab size (incl. padding 0).
        history_len: length ``L`` of the history fields.
        genres_per_item: width ``G`` of ``genres``.
        kg_per_item: width ``K`` of ``kg``.
    """

    n_dense: int
    user_cat_cardinalities: tuple[int, ...]
    n_items: int
    item_cat_cardinalities: tuple[int, ...]
    n_genres: int
    kg_buckets: int
    history_len: int
    genres_per_item: int
    kg_per_item: int


@dataclass
class FeatureBatch:
    """One batch of rows. Shapes use ``B`` = batch size.

    Fields:
        dense: ``[B, n_dense]`` float32, standardised continuous features.
        user_cat: ``[B, n_user_cat]`` int64, one column per user attribute.
        item_id: ``[B]`` int64.
        item_cat: ``[B, n_item_cat]`` int64, one column per item attribute.
        genres: ``[B, G]`` int64 genre ids, 0 = padding (multi-hot).
        kg: ``[B, K]`` int64 hashed KG entity ids, 0 = padding (multi-hot).
        hist_items: ``[B, L]`` int64 the user's items strictly before t, most recent first,
            0 = padding.
        hist_ratings: ``[B, L]`` int64 the ratings (1..5) of ``hist_items``, 0 = padding.
    """

    dense: torch.Tensor
    user_cat: torch.Tensor
    item_id: torch.Tensor
    item_cat: torch.Tensor
    genres: torch.Tensor
    kg: torch.Tensor
    hist_items: torch.Tensor
    hist_ratings: torch.Tensor

    def __len__(self) -> int:
        return int(self.item_id.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> FeatureBatch:
        return FeatureBatch(
            **{
                f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
                for f in fields(self)
            }
        )

    def pin_memory(self) -> FeatureBatch:
        return FeatureBatch(**{f.name: getattr(self, f.name).pin_memory() for f in fields(self)})

    def __getitem__(self, index: slice | torch.Tensor) -> FeatureBatch:
        return FeatureBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})
