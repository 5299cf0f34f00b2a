"""The foundation model (FM): a DCNv2-style ranker whose last shared layer SOLARIS reuses.

``FoundationModel.shared(batch)`` returns ``h``, the output of the last layer that every
task head reads. SOLARIS precomputes ``h`` for (user, item) pairs, compresses it with
``solaris.models.autoencoder.Autoencoder`` and hands the code to the vertical model.

The building blocks (``CrossNet``, ``MLP``, ``SequenceEncoder``) follow torchrec's
``torchrec.modules.crossnet`` / ``torchrec.modules.mlp``: small modules, shapes in the
docstrings, constructors that reject bad arguments with a :class:`ModelInputError` (a
``ValueError``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from solaris.examples.movielens.models.batch import FeatureBatch, FeatureSpec
from solaris.models import ModelInputError

__all__ = ["MLP", "CrossNet", "FoundationModel", "ModelInputError", "SequenceEncoder"]

N_RATINGS = 6  # ratings 1..5, 0 = padding


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelInputError(f"{name} must be a positive int, got {value!r}")


def _check_spec(spec: FeatureSpec, *, history: bool = True, kg: bool = True) -> None:
    """Rejects a ``FeatureSpec`` whose sizes cannot build embedding tables."""
    if spec.n_dense < 0:
        raise ModelInputError(f"spec.n_dense must be >= 0, got {spec.n_dense}")
    _check_positive("spec.n_items", spec.n_items)
    _check_positive("spec.n_genres", spec.n_genres)
    _check_positive("spec.genres_per_item", spec.genres_per_item)
    if kg:
        _check_positive("spec.kg_buckets", spec.kg_buckets)
        _check_positive("spec.kg_per_item", spec.kg_per_item)
    if history:
        _check_positive("spec.history_len", spec.history_len)
    for field in ("user_cat_cardinalities", "item_cat_cardinalities"):
        for i, card in enumerate(getattr(spec, field)):
            _check_positive(f"spec.{field}[{i}]", card)


class CrossNet(nn.Module):
    r"""Full-rank DCNv2 cross layers.

    Each layer computes :math:`x_{l+1} = x_0 \odot (W_l x_l + b_l) + x_l` with a full
    ``[D, D]`` matrix ``W_l``, so feature crosses of degree ``num_layers + 1`` are learnt
    explicitly while the residual keeps the lower-order terms.

    Args:
        in_features (int): width ``D`` of the input.
        num_layers (int): number of cross layers; ``0`` is the identity (for ablations).

    Call args:
        input (torch.Tensor): ``[B, D]``.

    Returns:
        torch.Tensor: ``[B, D]``.

    Example::

        >>> net = CrossNet(in_features=8, num_layers=2)
        >>> net(torch.randn(3, 8)).shape
        torch.Size([3, 8])
    """

    def __init__(self, in_features: int, num_layers: int) -> None:
        super().__init__()
        _check_positive("in_features", in_features)
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
            raise ModelInputError(f"num_layers must be an int >= 0, got {num_layers!r}")
        self.in_features = in_features
        self.num_layers = num_layers
        self.layers = nn.ModuleList(nn.Linear(in_features, in_features) for _ in range(num_layers))

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """
        Args:
            input (torch.Tensor): ``[B, D]``.

        Returns:
            torch.Tensor: ``[B, D]``.
        """
        x0 = input  # (B, D)
        x = x0  # (B, D)
        for layer in self.layers:
            x = x0 * layer(x) + x  # (B, D)
        return x


class MLP(nn.Module):
    """A stack of ``Linear -> [LayerNorm] -> ReLU -> [Dropout]`` layers.

    Every layer, the last included, is activated; put a plain ``nn.Linear`` after it for
    logits.

    Args:
        in_size (int): width of the input.
        layer_sizes (Sequence[int]): output width of each layer, at least one.
        layer_norm (bool): apply ``LayerNorm`` before each ReLU.
        dropout (float): dropout probability after each ReLU, in ``[0, 1)``.

    Call args:
        input (torch.Tensor): ``[B, in_size]``.

    Returns:
        torch.Tensor: ``[B, layer_sizes[-1]]``.

    Example::

        >>> mlp = MLP(in_size=10, layer_sizes=[16, 4], layer_norm=True, dropout=0.1)
        >>> mlp(torch.randn(3, 10)).shape
        torch.Size([3, 4])
    """

    def __init__(
        self,
        in_size: int,
        layer_sizes: Sequence[int],
        layer_norm: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        _check_positive("in_size", in_size)
        layer_sizes = list(layer_sizes)
        if not layer_sizes:
            raise ModelInputError("layer_sizes must name at least one layer")
        for i, size in enumerate(layer_sizes):
            _check_positive(f"layer_sizes[{i}]", size)
        if not 0.0 <= dropout < 1.0:
            raise ModelInputError(f"dropout must be in [0, 1), got {dropout}")
        self.in_size = in_size
        self.out_size = layer_sizes[-1]
        layers: list[nn.Module] = []
        width = in_size
        for size in layer_sizes:
            layers.append(nn.Linear(width, size))
            if layer_norm:
                layers.append(nn.LayerNorm(size))
            layers.append(nn.ReLU())
            if dropout > 0.0:
                layers.append(nn.Dropout(dropout))
            width = size
        self.layers = nn.Sequential(*layers)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """
        Args:
            input (torch.Tensor): ``[B, in_size]``.

        Returns:
            torch.Tensor: ``[B, out_size]``.
        """
        out: torch.Tensor = self.layers(input)
        return out


class SequenceEncoder(nn.Module):
    """DIN-style target attention over a user's rating history.

    Each history step is embedded as ``item_embedding(item) + rating_embedding(rating)``;
    an MLP scores it against the target item's embedding (DIN's
    ``[e, t, e - t, e * t]`` input); a softmax over the non-padding steps weights the sum.
    Padding steps (``hist_items == 0``) get zero weight, so a history that is all padding
    encodes to the zero vector. There is no positional term: the encoding does not depend
    on the order of the steps.

    Args:
        item_embedding (nn.Embedding): the item table, shared with the target item
            (``[n_items, D]``); this module registers it but does not own a copy.
        n_ratings (int): rating vocab size, incl. padding 0 (MovieLens: 6).
        attention_hidden (int): hidden width of the attention scorer.

    Call args:
        hist_items (torch.Tensor): ``[B, L]`` int64 item ids, 0 = padding.
        hist_ratings (torch.Tensor): ``[B, L]`` int64 ratings, 0 = padding.
        target_emb (torch.Tensor): ``[B, D]`` embedding of the target item.

    Returns:
        torch.Tensor: ``[B, D]``.

    Example::

        >>> items = nn.Embedding(10, 4, padding_idx=0)
        >>> enc = SequenceEncoder(items)
        >>> hist = torch.tensor([[3, 5, 0], [0, 0, 0]])
        >>> ratings = torch.tensor([[4, 1, 0], [0, 0, 0]])
        >>> out = enc(hist, ratings, items(torch.tensor([2, 7])))
        >>> out.shape, bool(out[1].abs().sum() == 0)
        (torch.Size([2, 4]), True)
    """

    def __init__(
        self,
        item_embedding: nn.Embedding,
        n_ratings: int = N_RATINGS,
        attention_hidden: int = 32,
    ) -> None:
        super().__init__()
        if not isinstance(item_embedding, nn.Embedding):
            raise ModelInputError(
                f"item_embedding must be an nn.Embedding, got {type(item_embedding).__name__}"
            )
        _check_positive("n_ratings", n_ratings)
        _check_positive("attention_hidden", attention_hidden)
        dim = item_embedding.embedding_dim
        self.embed_dim = dim
        self.item_embedding = item_embedding
        self.rating_embedding = nn.Embedding(n_ratings, dim, padding_idx=0)
        self.attention = nn.Sequential(
            nn.Linear(4 * dim, attention_hidden),
            nn.ReLU(),
            nn.Linear(attention_hidden, 1),
        )

    def forward(
        self,
        hist_items: torch.Tensor,
        hist_ratings: torch.Tensor,
        target_emb: torch.Tensor,
    ) -> torch.Tensor:
        """
        Args:
            hist_items (torch.Tensor): ``[B, L]`` int64, 0 = padding.
            hist_ratings (torch.Tensor): ``[B, L]`` int64, 0 = padding.
            target_emb (torch.Tensor): ``[B, D]``.

        Returns:
            torch.Tensor: ``[B, D]``; zero for a row whose history is all padding.
        """
        mask = hist_items != 0  # (B, L)
        steps = self.item_embedding(hist_items) + self.rating_embedding(hist_ratings)  # (B, L, D)
        target = target_emb.unsqueeze(1).expand_as(steps)  # (B, L, D)
        scorer_in = torch.cat([steps, target, steps - target, steps * target], dim=-1)
        scores = self.attention(scorer_in).squeeze(-1)  # (B, L)
        # A finite fill keeps an all-padding row finite (uniform softmax), then the mask
        # zeroes its weights: no -inf, so no NaN.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # (B, L)
        weights = torch.softmax(scores, dim=-1) * mask.to(scores.dtype)  # (B, L)
        return torch.bmm(weights.unsqueeze(1), steps).squeeze(1)  # (B, D)


class FoundationModel(nn.Module):
    """The multi-task FM: embeddings -> ``CrossNet`` -> ``MLP`` -> ``h`` -> one head per task.

    Parts, in order:

    * ``dense_arch``: ``MLP`` of ``dense`` to ``embed_dim`` (absent when ``n_dense == 0``);
    * ``user_cat_embeddings`` / ``item_cat_embeddings``: one ``nn.Embedding`` per column;
    * ``item_embedding``: the item-id table, shared with the sequence encoder;
    * ``genre_bag`` / ``kg_bag``: ``nn.EmbeddingBag(mode="mean", padding_idx=0)`` over the
      padded id lists (an all-padding list gives zeros);
    * ``sequence_encoder``: ``SequenceEncoder`` of the history against the target item;
    * ``cross_net``: ``CrossNet`` over the concatenation (width ``interaction_dim``);
    * ``over_arch``: ``MLP`` to ``shared_dim``, whose output is ``h``, the LAST SHARED LAYER;
    * ``task_heads``: one ``nn.Linear(shared_dim, 1)`` per task.

    Args:
        spec (FeatureSpec): vocabulary sizes and widths of the inputs.
        embed_dim (int): width ``E`` of every embedding.
        cross_layers (int): number of cross layers (``0`` disables crossing).
        shared_dim (int): width of ``h``.
        tasks (Sequence[str]): task names, one logit each, in this order.
        dropout (float): dropout in ``over_arch``, in ``[0, 1)``.

    Call args:
        batch (FeatureBatch): ``B`` rows.

    Returns:
        torch.Tensor: ``[B, n_tasks]`` logits (``forward``); ``shared`` returns
        ``[B, shared_dim]``.

    Example::

        >>> from solaris.examples.movielens.models.batch import FeatureBatch, FeatureSpec
        >>> spec = FeatureSpec(n_dense=2, user_cat_cardinalities=(3, 8), n_items=10,
        ...     item_cat_cardinalities=(4,), n_genres=6, kg_buckets=16, history_len=3,
        ...     genres_per_item=2, kg_per_item=2)
        >>> batch = FeatureBatch(dense=torch.randn(2, 2),
        ...     user_cat=torch.tensor([[1, 7], [2, 0]]), item_id=torch.tensor([4, 9]),
        ...     item_cat=torch.tensor([[1], [3]]), genres=torch.tensor([[1, 5], [2, 0]]),
        ...     kg=torch.tensor([[3, 0], [0, 0]]), hist_items=torch.tensor([[2, 5, 0], [0, 0, 0]]),
        ...     hist_ratings=torch.tensor([[4, 5, 0], [0, 0, 0]]))
        >>> fm = FoundationModel(spec, embed_dim=4, shared_dim=8, tasks=("like", "love"))
        >>> fm.shared(batch).shape, fm(batch).shape
        (torch.Size([2, 8]), torch.Size([2, 2]))
    """

    def __init__(
        self,
        spec: FeatureSpec,
        embed_dim: int = 16,
        cross_layers: int = 2,
        shared_dim: int = 128,
        tasks: Sequence[str] = ("like", "love"),
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        _check_spec(spec)
        _check_positive("embed_dim", embed_dim)
        _check_positive("shared_dim", shared_dim)
        if isinstance(tasks, str):
            raise ModelInputError(f"tasks must be a sequence of names, not the string {tasks!r}")
        tasks = tuple(tasks)
        if not tasks:
            raise ModelInputError("tasks must name at least one task")
        if len(set(tasks)) != len(tasks):
            raise ModelInputError(f"tasks must be unique, got {tasks}")
        for task in tasks:
            if not isinstance(task, str) or not task or "." in task:
                raise ModelInputError(
                    f"each task must be a non-empty str without '.', got {task!r}"
                )
        if not 0.0 <= dropout < 1.0:
            raise ModelInputError(f"dropout must be in [0, 1), got {dropout}")

        self.spec = spec
        self.embed_dim = embed_dim
        self.shared_dim = shared_dim
        self.tasks: tuple[str, ...] = tasks

        self.dense_arch = MLP(spec.n_dense, [embed_dim]) if spec.n_dense > 0 else None
        self.user_cat_embeddings = nn.ModuleList(
            nn.Embedding(card, embed_dim) for card in spec.user_cat_cardinalities
        )
        self.item_embedding = nn.Embedding(spec.n_items, embed_dim, padding_idx=0)
        self.item_cat_embeddings = nn.ModuleList(
            nn.Embedding(card, embed_dim) for card in spec.item_cat_cardinalities
        )
        self.genre_bag = nn.EmbeddingBag(spec.n_genres, embed_dim, mode="mean", padding_idx=0)
        self.kg_bag = nn.EmbeddingBag(spec.kg_buckets, embed_dim, mode="mean", padding_idx=0)
        self.sequence_encoder = SequenceEncoder(self.item_embedding)

        n_slots = (
            int(self.dense_arch is not None)
            + len(self.user_cat_embeddings)
            + 1  # item id
            + len(self.item_cat_embeddings)
            + 2  # genres, kg
            + 1  # history
        )
        self.interaction_dim = n_slots * embed_dim
        self.cross_net = CrossNet(self.interaction_dim, cross_layers)
        self.over_arch = MLP(
            self.interaction_dim, [shared_dim, shared_dim], layer_norm=True, dropout=dropout
        )
        self.task_heads = nn.ModuleDict({task: nn.Linear(shared_dim, 1) for task in tasks})

    def _interaction_input(self, batch: FeatureBatch) -> torch.Tensor:
        """All feature embeddings side by side: ``[B, interaction_dim]``."""
        item = self.item_embedding(batch.item_id)  # (B, E)
        parts: list[torch.Tensor] = []
        if self.dense_arch is not None:
            parts.append(self.dense_arch(batch.dense))  # (B, E)
        parts += [emb(batch.user_cat[:, i]) for i, emb in enumerate(self.user_cat_embeddings)]
        parts.append(item)
        parts += [emb(batch.item_cat[:, i]) for i, emb in enumerate(self.item_cat_embeddings)]
        parts.append(self.genre_bag(batch.genres))  # (B, E)
        parts.append(self.kg_bag(batch.kg))  # (B, E)
        parts.append(self.sequence_encoder(batch.hist_items, batch.hist_ratings, item))  # (B, E)
        return torch.cat(parts, dim=1)  # (B, n_slots * E)

    def shared(self, batch: FeatureBatch) -> torch.Tensor:
        """The last shared layer ``h``, the representation SOLARIS precomputes.

        Args:
            batch (FeatureBatch): ``B`` rows.

        Returns:
            torch.Tensor: ``[B, shared_dim]``.
        """
        x0 = self._interaction_input(batch)  # (B, interaction_dim)
        crossed = self.cross_net(x0)  # (B, interaction_dim)
        shared: torch.Tensor = self.over_arch(crossed)  # (B, shared_dim)
        return shared

    def heads(self, h: torch.Tensor) -> torch.Tensor:
        """Task logits from the last shared layer.

        Args:
            h (torch.Tensor): ``[B, shared_dim]``.

        Returns:
            torch.Tensor: ``[B, n_tasks]`` logits, columns in ``self.tasks`` order.
        """
        return torch.cat([self.task_heads[task](h) for task in self.tasks], dim=1)  # (B, T)

    def forward(self, batch: FeatureBatch) -> torch.Tensor:
        """
        Args:
            batch (FeatureBatch): ``B`` rows.

        Returns:
            torch.Tensor: ``[B, n_tasks]`` logits, ``heads(shared(batch))``.
        """
        return self.heads(self.shared(batch))
