"""The vertical model (VM): a small ranker that reads the FM's codes ``z`` as features.

The VM's own features are deliberately fewer than the FM's (no KG; no history unless it is
the user-aware VM, which summarises the user's last items by the mean of its own item
embeddings). SOLARIS
adds, per tier (pair, neighbour, user-aggregate, item-aggregate, ...), a code
``z`` of width ``z_dim`` and a presence flag; a tier that is not in the cache is missing
and its code is zero. ``tier_dropout`` trains the VM with the coverage it will meet online.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from solaris.examples.movielens.models.batch import FeatureBatch, FeatureSpec
from solaris.examples.movielens.models.fm import MLP, _check_positive, _check_spec
from solaris.models import ModelInputError

__all__ = ["VerticalModel", "tier_dropout"]


def _check_tiers(tier_z: torch.Tensor, tier_mask: torch.Tensor) -> None:
    if tier_z.dim() != 3:
        raise ModelInputError(
            f"tier_z must have shape [B, n_tiers, z_dim], got {list(tier_z.shape)}"
        )
    if tuple(tier_mask.shape) != tuple(tier_z.shape[:2]):
        raise ModelInputError(
            f"tier_mask must have shape {list(tier_z.shape[:2])} (tier_z's [B, n_tiers]), "
            f"got {list(tier_mask.shape)}"
        )


def tier_dropout(
    tier_z: torch.Tensor,
    tier_mask: torch.Tensor,
    keep: float | Sequence[float],
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Drops each present tier of each row independently, with probability ``1 - keep``.

    A dropped tier becomes missing: its mask is set to 0 and its code to zero. A missing
    tier stays missing. The inputs are not modified.

    Args:
        tier_z (torch.Tensor): ``[B, n_tiers, z_dim]`` codes.
        tier_mask (torch.Tensor): ``[B, n_tiers]`` presence, 1 = present (float or bool).
        keep (float | Sequence[float]): keep probability in ``[0, 1]``, one for all tiers
            or one per tier.
        generator (torch.Generator | None): source of randomness (on ``tier_z``'s device),
            for reproducible draws.

    Returns:
        tuple[torch.Tensor, torch.Tensor]: new ``tier_z`` ``[B, n_tiers, z_dim]`` and
        ``tier_mask`` ``[B, n_tiers]`` (same dtype as the input mask).

    Example::

        >>> z, mask = torch.ones(4, 2, 3), torch.tensor([[1.0, 0.0]] * 4)
        >>> z2, mask2 = tier_dropout(z, mask, keep=0.5, generator=torch.Generator().manual_seed(0))
        >>> bool((mask2 <= mask).all()), bool((z2[:, 1] == 0).all())
        (True, True)
    """
    _check_tiers(tier_z, tier_mask)
    n_tiers = tier_z.shape[1]
    if isinstance(keep, int | float):
        keeps = [float(keep)] * n_tiers
    else:
        keeps = [float(k) for k in keep]
        if len(keeps) != n_tiers:
            raise ModelInputError(f"keep has {len(keeps)} values for {n_tiers} tiers")
    for k in keeps:
        if not 0.0 <= k <= 1.0:
            raise ModelInputError(f"keep must be in [0, 1], got {k}")
    keep_p = torch.tensor(keeps, dtype=torch.float32, device=tier_z.device)  # (n_tiers,)
    draws = torch.rand(
        tier_mask.shape, generator=generator, device=tier_z.device, dtype=torch.float32
    )  # (B, n_tiers)
    kept = (draws < keep_p) & (tier_mask != 0)  # (B, n_tiers)
    new_mask = kept.to(tier_mask.dtype)  # (B, n_tiers)
    new_z = tier_z * kept.unsqueeze(-1).to(tier_z.dtype)  # (B, n_tiers, z_dim)
    return new_z, new_mask


class VerticalModel(nn.Module):
    """A small MLP ranker over its own features plus ``n_tiers`` SOLARIS codes.

    Parts:

    * ``dense_arch``: ``MLP`` of ``dense`` to ``embed_dim`` (absent when ``n_dense == 0``);
    * ``user_cat_embeddings`` / ``item_cat_embeddings``: one ``nn.Embedding`` per column;
    * ``item_embedding``: the item-id table (its own, not the FM's);
    * ``genre_bag``: ``nn.EmbeddingBag(mode="mean", padding_idx=0)`` over ``genres``;
    * the history summary (only with ``history_summary``, the user-aware VM): the mean of
      ``item_embedding`` over the user's last items ``hist_items`` (padding skipped), so the
      user's taste lives in the same learned space as the candidate item;
    * ``tier_projections``: one ``nn.Linear(z_dim, embed_dim)`` per tier; each projected
      code is multiplied by its tier's mask, so a missing tier contributes exactly zero
      whatever its ``z``; the masks themselves are appended as ``n_tiers`` inputs;
    * ``mlp``: ``MLP`` of two ``hidden`` layers; ``head``: ``nn.Linear(hidden, n_tasks)``.

    With ``n_tiers == 0`` this is the baseline VM and takes no tier arguments.

    Args:
        spec (FeatureSpec): vocabulary sizes and widths of the inputs.
        n_tiers (int): number of SOLARIS tiers, ``>= 0``.
        z_dim (int): width of each tier's code.
        embed_dim (int): width of every embedding and tier projection.
        hidden (int): width of the MLP layers.
        n_tasks (int): number of logits.
        history_summary (bool): read ``hist_items`` (``spec.history_len > 0``) as the mean
            of their item embeddings: the user-aware VM.

    Call args:
        batch (FeatureBatch): ``B`` rows (``kg`` and ``hist_ratings`` are not read;
            ``hist_items`` ``[B, spec.history_len]`` only with ``history_summary``).
        tier_z (torch.Tensor | None): ``[B, n_tiers, z_dim]``; zero for missing tiers.
        tier_mask (torch.Tensor | None): ``[B, n_tiers]``, 1 = present, 0 = missing.
            Both ``None`` with ``n_tiers > 0`` means every tier is missing.

    Returns:
        torch.Tensor: ``[B, n_tasks]`` logits.

    Example::

        >>> from solaris.examples.movielens.models.batch import FeatureBatch, FeatureSpec
        >>> spec = FeatureSpec(n_dense=2, user_cat_cardinalities=(3,), n_items=10,
        ...     item_cat_cardinalities=(4,), n_genres=6, kg_buckets=16, history_len=3,
        ...     genres_per_item=2, kg_per_item=2)
        >>> batch = FeatureBatch(dense=torch.randn(2, 2), user_cat=torch.tensor([[1], [2]]),
        ...     item_id=torch.tensor([4, 9]), item_cat=torch.tensor([[1], [3]]),
        ...     genres=torch.tensor([[1, 5], [2, 0]]), kg=torch.zeros(2, 2, dtype=torch.long),
        ...     hist_items=torch.zeros(2, 3, dtype=torch.long),
        ...     hist_ratings=torch.zeros(2, 3, dtype=torch.long))
        >>> vm = VerticalModel(spec, n_tiers=2, z_dim=4, embed_dim=4, hidden=8, n_tasks=2)
        >>> tier_z, tier_mask = torch.randn(2, 2, 4), torch.tensor([[1.0, 0.0], [1.0, 1.0]])
        >>> vm(batch, tier_z * tier_mask.unsqueeze(-1), tier_mask).shape
        torch.Size([2, 2])
    """

    def __init__(
        self,
        spec: FeatureSpec,
        n_tiers: int = 0,
        z_dim: int = 32,
        embed_dim: int = 16,
        hidden: int = 64,
        n_tasks: int = 1,
        history_summary: bool = False,
    ) -> None:
        super().__init__()
        _check_spec(spec, history=history_summary, kg=False)
        if isinstance(n_tiers, bool) or not isinstance(n_tiers, int) or n_tiers < 0:
            raise ModelInputError(f"n_tiers must be an int >= 0, got {n_tiers!r}")
        _check_positive("z_dim", z_dim)
        _check_positive("embed_dim", embed_dim)
        _check_positive("hidden", hidden)
        _check_positive("n_tasks", n_tasks)

        self.spec = spec
        self.n_tiers = n_tiers
        self.z_dim = z_dim
        self.embed_dim = embed_dim
        self.n_tasks = n_tasks
        self.history_summary = history_summary

        self.dense_arch = MLP(spec.n_dense, [embed_dim]) if spec.n_dense > 0 else None
        self.user_cat_embeddings = nn.ModuleList(
            nn.Embedding(card, embed_dim) for card in spec.user_cat_cardinalities
        )
        self.item_embedding = nn.Embedding(spec.n_items, embed_dim, padding_idx=0)
        self.item_cat_embeddings = nn.ModuleList(
            nn.Embedding(card, embed_dim) for card in spec.item_cat_cardinalities
        )
        self.genre_bag = nn.EmbeddingBag(spec.n_genres, embed_dim, mode="mean", padding_idx=0)
        self.tier_projections = nn.ModuleList(nn.Linear(z_dim, embed_dim) for _ in range(n_tiers))

        n_slots = (
            int(self.dense_arch is not None)
            + len(self.user_cat_embeddings)
            + 1  # item id
            + len(self.item_cat_embeddings)
            + 1  # genres
            + int(history_summary)
            + n_tiers
        )
        self.input_dim = n_slots * embed_dim + n_tiers  # + the masks
        self.mlp = MLP(self.input_dim, [hidden, hidden])
        self.head = nn.Linear(hidden, n_tasks)

    def _tier_inputs(
        self,
        batch_size: int,
        tier_z: torch.Tensor | None,
        tier_mask: torch.Tensor | None,
        like: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Validated ``tier_z`` ``[B, n_tiers, z_dim]`` and float ``tier_mask`` ``[B, n_tiers]``."""
        if self.n_tiers == 0 and (tier_z is not None or tier_mask is not None):
            raise ModelInputError("this VerticalModel has n_tiers == 0; pass no tier_z/tier_mask")
        if (tier_z is None) != (tier_mask is None):
            raise ModelInputError("pass both tier_z and tier_mask, or neither")
        if tier_z is None or tier_mask is None:
            shape = (batch_size, self.n_tiers)
            zeros = like.new_zeros(shape)
            return like.new_zeros((*shape, self.z_dim)), zeros
        expected = (batch_size, self.n_tiers, self.z_dim)
        if tuple(tier_z.shape) != expected:
            raise ModelInputError(
                f"tier_z must have shape {list(expected)}, got {list(tier_z.shape)}"
            )
        _check_tiers(tier_z, tier_mask)
        return tier_z, tier_mask.to(tier_z.dtype)

    def forward(
        self,
        batch: FeatureBatch,
        tier_z: torch.Tensor | None = None,
        tier_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """
        Args:
            batch (FeatureBatch): ``B`` rows.
            tier_z (torch.Tensor | None): ``[B, n_tiers, z_dim]``.
            tier_mask (torch.Tensor | None): ``[B, n_tiers]``, 1 = present.

        Returns:
            torch.Tensor: ``[B, n_tasks]`` logits.
        """
        item = self.item_embedding(batch.item_id)  # (B, E)
        tier_z, tier_mask = self._tier_inputs(len(batch), tier_z, tier_mask, like=item)
        parts: list[torch.Tensor] = []
        if self.dense_arch is not None:
            parts.append(self.dense_arch(batch.dense))  # (B, E)
        parts += [emb(batch.user_cat[:, i]) for i, emb in enumerate(self.user_cat_embeddings)]
        parts.append(item)
        parts += [emb(batch.item_cat[:, i]) for i, emb in enumerate(self.item_cat_embeddings)]
        parts.append(self.genre_bag(batch.genres))  # (B, E)
        if self.history_summary:
            parts.append(
                F.embedding_bag(
                    batch.hist_items, self.item_embedding.weight, mode="mean", padding_idx=0
                )
            )  # (B, E): the mean over the user's last items
        for t, proj in enumerate(self.tier_projections):
            parts.append(proj(tier_z[:, t]) * tier_mask[:, t : t + 1])  # (B, E)
        parts.append(tier_mask)  # (B, n_tiers)
        x = torch.cat(parts, dim=1)  # (B, input_dim)
        logits: torch.Tensor = self.head(self.mlp(x))  # (B, n_tasks)
        return logits
