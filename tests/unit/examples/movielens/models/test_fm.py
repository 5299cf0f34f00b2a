"""Tests for ``solaris.examples.movielens.models.fm``."""

from __future__ import annotations

import dataclasses
import doctest
import inspect
from collections.abc import Callable
from types import ModuleType

import pytest
import torch
from torch import nn

from solaris.examples.movielens.models import fm as fm_module
from solaris.examples.movielens.models import vm as vm_module
from solaris.examples.movielens.models.batch import FeatureBatch, FeatureSpec
from solaris.examples.movielens.models.fm import MLP, CrossNet, FoundationModel, SequenceEncoder
from solaris.models import autoencoder as autoencoder_module

MakeBatch = Callable[..., FeatureBatch]
MODULES = (fm_module, autoencoder_module, vm_module)


def _with(batch: FeatureBatch, **changes: torch.Tensor) -> FeatureBatch:
    return dataclasses.replace(batch, **changes)


def _permute_columns(x: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return x[:, torch.randperm(x.shape[1], generator=g)]


def _fm(spec: FeatureSpec, seed: int = 0, **kwargs: object) -> FoundationModel:
    torch.manual_seed(seed)
    kwargs = {"embed_dim": 8, "shared_dim": 16, **kwargs}
    return FoundationModel(spec, **kwargs).eval()  # type: ignore[arg-type]


# --- CrossNet -----------------------------------------------------------------------------


def test_crossnet_shape_and_formula() -> None:
    torch.manual_seed(0)
    net = CrossNet(in_features=6, num_layers=1)
    x0 = torch.randn(4, 6)
    out = net(x0)
    assert out.shape == (4, 6)
    layer = net.layers[0]
    torch.testing.assert_close(out, x0 * (x0 @ layer.weight.T + layer.bias) + x0)


def test_crossnet_two_layers_shape_and_zero_layers_is_identity() -> None:
    x = torch.randn(3, 5)
    assert CrossNet(5, 2)(x).shape == (3, 5)
    torch.testing.assert_close(CrossNet(5, 0)(x), x)


@pytest.mark.parametrize(("in_features", "num_layers"), [(0, 1), (-1, 1), (4, -1), (4, 1.5)])
def test_crossnet_rejects_bad_arguments(in_features: int, num_layers: int) -> None:
    with pytest.raises(ValueError):
        CrossNet(in_features, num_layers)


# --- MLP ----------------------------------------------------------------------------------


@pytest.mark.parametrize("layer_norm", [False, True])
def test_mlp_shape(layer_norm: bool) -> None:
    mlp = MLP(7, [12, 3], layer_norm=layer_norm, dropout=0.2)
    out = mlp(torch.randn(5, 7))
    assert out.shape == (5, 3)
    assert mlp.out_size == 3
    assert (out >= 0).all()  # the last layer is activated too


@pytest.mark.parametrize(
    ("in_size", "layer_sizes", "dropout"),
    [(0, [4], 0.0), (4, [], 0.0), (4, [4, 0], 0.0), (4, [4], 1.0), (4, [4], -0.1)],
)
def test_mlp_rejects_bad_arguments(in_size: int, layer_sizes: list[int], dropout: float) -> None:
    with pytest.raises(ValueError):
        MLP(in_size, layer_sizes, dropout=dropout)


# --- SequenceEncoder ----------------------------------------------------------------------


def _encoder(seed: int = 0) -> tuple[SequenceEncoder, nn.Embedding]:
    torch.manual_seed(seed)
    items = nn.Embedding(30, 8, padding_idx=0)
    return SequenceEncoder(items), items


def test_sequence_encoder_shape_and_shares_the_item_table() -> None:
    enc, items = _encoder()
    hist = torch.tensor([[3, 4, 5, 0], [7, 0, 0, 0]])
    ratings = torch.tensor([[5, 1, 3, 0], [2, 0, 0, 0]])
    out = enc(hist, ratings, items(torch.tensor([1, 2])))
    assert out.shape == (2, 8)
    assert enc.item_embedding is items


def test_sequence_encoder_all_padding_is_zero_and_finite_with_finite_grads() -> None:
    enc, items = _encoder()
    hist = torch.zeros(3, 5, dtype=torch.long)
    target = items(torch.tensor([1, 2, 3]))
    out = enc(hist, torch.zeros_like(hist), target)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.zeros(3, 8))
    (out.sum() + target.sum()).backward()
    for p in enc.parameters():
        assert p.grad is None or torch.isfinite(p.grad).all()


def test_sequence_encoder_ignores_where_the_padding_sits() -> None:
    enc, items = _encoder()
    hist = torch.tensor([[3, 4, 0, 0, 5, 0]])
    ratings = torch.tensor([[5, 1, 0, 0, 3, 0]])
    target = items(torch.tensor([9]))
    base = enc(hist, ratings, target)
    for seed in range(3):
        perm = torch.randperm(6, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(enc(hist[:, perm], ratings[:, perm], target), base)
    # a longer history of the same steps, padded further, encodes the same
    longer = torch.cat([hist, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    longer_r = torch.cat([ratings, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(enc(longer, longer_r, target), base)


def test_sequence_encoder_rejects_bad_arguments() -> None:
    items = nn.Embedding(10, 4)
    with pytest.raises(ValueError):
        SequenceEncoder(nn.Linear(4, 4))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SequenceEncoder(items, n_ratings=0)
    with pytest.raises(ValueError):
        SequenceEncoder(items, attention_hidden=0)


# --- FoundationModel ----------------------------------------------------------------------


def test_fm_shapes_and_attributes(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    fm = _fm(spec)
    batch = make_batch(8)
    assert fm.shared(batch).shape == (8, 16)
    assert fm(batch).shape == (8, 2)
    assert fm.heads(torch.randn(3, 16)).shape == (3, 2)
    assert fm.tasks == ("like", "love")
    assert isinstance(fm.tasks, tuple)
    assert fm.shared_dim == 16


def test_fm_default_sizes(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    fm = FoundationModel(spec).eval()
    assert fm.shared(make_batch(4)).shape == (4, 128)
    assert fm(make_batch(4)).shape == (4, 2)


def test_fm_forward_is_heads_of_shared(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    fm = _fm(spec, tasks=("like", "love", "watch"))
    batch = make_batch(6)
    with torch.no_grad():
        torch.testing.assert_close(fm(batch), fm.heads(fm.shared(batch)))
    assert fm(batch).shape == (6, 3)


def test_fm_heads_follow_task_order(spec: FeatureSpec) -> None:
    fm = _fm(spec, tasks=("love", "like"))
    h = torch.randn(4, 16)
    with torch.no_grad():
        logits = fm.heads(h)
        torch.testing.assert_close(logits[:, 0:1], fm.task_heads["love"](h))
        torch.testing.assert_close(logits[:, 1:2], fm.task_heads["like"](h))


def test_fm_all_padding_history_is_finite(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    fm = _fm(spec)
    batch = make_batch(5)
    empty = torch.zeros_like(batch.hist_items)
    batch = _with(batch, hist_items=empty, hist_ratings=empty, kg=torch.zeros_like(batch.kg))
    fm.train()
    out = fm(batch)
    assert torch.isfinite(out).all()
    out.sum().backward()
    for p in fm.parameters():
        assert p.grad is None or torch.isfinite(p.grad).all()


def test_fm_ignores_padding_positions(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    fm = _fm(spec)
    batch = make_batch(8)
    with torch.no_grad():
        base = fm(batch)
        for seed in range(3):
            perm = torch.randperm(spec.history_len, generator=torch.Generator().manual_seed(seed))
            shuffled = _with(
                batch,
                genres=_permute_columns(batch.genres, seed),
                kg=_permute_columns(batch.kg, seed + 10),
                hist_items=batch.hist_items[:, perm],
                hist_ratings=batch.hist_ratings[:, perm],
            )
            torch.testing.assert_close(fm(shuffled), base)


def test_fm_reads_every_input(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    fm = _fm(spec)
    batch = make_batch(8)
    with torch.no_grad():
        base = fm(batch)
        for name, other in dataclasses.asdict(make_batch(8, seed=1)).items():
            changed = fm(_with(batch, **{name: other}))
            assert not torch.allclose(changed, base), f"output ignores {name}"


def test_fm_backward_reaches_every_part(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    fm = _fm(spec).train()
    fm(make_batch(16)).sum().backward()
    missing = [n for n, p in fm.named_parameters() if p.grad is None]
    assert not missing


def test_fm_without_dense_and_without_crossing(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    spec0 = dataclasses.replace(spec, n_dense=0, user_cat_cardinalities=())
    fm = _fm(spec0, cross_layers=0)
    assert fm.dense_arch is None
    assert fm(make_batch(3, spec=spec0)).shape == (3, 2)


def test_fm_is_deterministic_per_seed(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    batch = make_batch(8)
    with torch.no_grad():
        a, b, c = _fm(spec, seed=3)(batch), _fm(spec, seed=3)(batch), _fm(spec, seed=4)(batch)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(a, c)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tasks": ()},
        {"tasks": []},
        {"tasks": ("like", "like")},
        {"tasks": "like"},
        {"tasks": ("",)},
        {"tasks": ("a.b",)},
        {"embed_dim": 0},
        {"embed_dim": -2},
        {"shared_dim": 0},
        {"cross_layers": -1},
        {"dropout": 1.0},
        {"dropout": -0.5},
    ],
)
def test_fm_rejects_bad_arguments(spec: FeatureSpec, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        FoundationModel(spec, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "change",
    [
        {"n_items": 0},
        {"n_genres": 0},
        {"kg_buckets": 0},
        {"history_len": 0},
        {"n_dense": -1},
        {"user_cat_cardinalities": (3, 0)},
        {"item_cat_cardinalities": (-1,)},
    ],
)
def test_fm_rejects_bad_spec(spec: FeatureSpec, change: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        FoundationModel(dataclasses.replace(spec, **change))  # type: ignore[arg-type]


# --- documentation (all three model files) ----------------------------------------------


def _public_modules(module: ModuleType) -> list[type[nn.Module]]:
    """The public ``nn.Module`` classes defined in ``module``."""
    return [
        cls
        for name, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, nn.Module)
        and cls.__module__ == module.__name__
        and not name.startswith("_")
    ]


def test_public_module_classes_are_the_expected_ones() -> None:
    names = {cls.__name__ for module in MODULES for cls in _public_modules(module)}
    assert names == {
        "CrossNet",
        "MLP",
        "SequenceEncoder",
        "FoundationModel",
        "Autoencoder",
        "VerticalModel",
    }


@pytest.mark.parametrize(
    "cls", [cls for module in MODULES for cls in _public_modules(module)], ids=lambda c: c.__name__
)
def test_public_modules_are_documented(cls: type[nn.Module]) -> None:
    doc = inspect.getdoc(cls) or ""
    assert "Args:" in doc, f"{cls.__name__} docstring has no Args section"
    assert "Returns:" in doc or "Shape" in doc, f"{cls.__name__} docstring has no Returns/Shape"
    assert ">>>" in doc, f"{cls.__name__} docstring has no example"
    forward_doc = inspect.getdoc(cls.forward) or ""
    assert "Args:" in forward_doc and "Returns:" in forward_doc, f"{cls.__name__}.forward"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples_run(module: ModuleType) -> None:
    torch.manual_seed(0)
    result = doctest.testmod(module, extraglobs={"torch": torch, "nn": nn})
    assert result.attempted > 0
    assert result.failed == 0
