"""Tests for ``solaris.examples.movielens.models.vm``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from solaris.examples.movielens.models.batch import FeatureBatch, FeatureSpec
from solaris.examples.movielens.models.vm import VerticalModel, tier_dropout

MakeBatch = Callable[..., FeatureBatch]
N_TIERS, Z_DIM = 4, 6


def _vm(spec: FeatureSpec, n_tiers: int = N_TIERS, seed: int = 0, **kwargs: int) -> VerticalModel:
    torch.manual_seed(seed)
    kwargs = {"z_dim": Z_DIM, "embed_dim": 8, "hidden": 16, **kwargs}
    return VerticalModel(spec, n_tiers=n_tiers, **kwargs).eval()


def _tiers(batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random codes and masks, with missing tiers' codes zeroed."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(batch_size, N_TIERS, generator=g) < 0.5).float()
    mask[0] = 1.0
    mask[1] = 0.0
    z = torch.randn(batch_size, N_TIERS, Z_DIM, generator=g) * mask.unsqueeze(-1)
    return z, mask


# --- VerticalModel ------------------------------------------------------------------------


def test_baseline_shape(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    vm = _vm(spec, n_tiers=0, n_tasks=2)
    assert vm(make_batch(8)).shape == (8, 2)
    assert len(vm.tier_projections) == 0


def test_default_sizes(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    assert VerticalModel(spec)(make_batch(3)).shape == (3, 1)
    vm = VerticalModel(spec, n_tiers=2)
    assert vm(make_batch(3), torch.zeros(3, 2, 32), torch.ones(3, 2)).shape == (3, 1)


def test_shape_with_tiers(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    vm = _vm(spec, n_tasks=3)
    z, mask = _tiers(8)
    assert vm(make_batch(8), z, mask).shape == (8, 3)
    assert vm(make_batch(8), z, mask.bool()).shape == (8, 3)


def test_does_not_read_kg_or_history(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    vm = _vm(spec)
    batch, other = make_batch(8), make_batch(8, seed=1)
    z, mask = _tiers(8)
    with torch.no_grad():
        base = vm(batch, z, mask)
        for name in ("kg", "hist_items", "hist_ratings"):
            torch.testing.assert_close(
                vm(dataclasses.replace(batch, **{name: getattr(other, name)}), z, mask), base
            )
        for name in ("dense", "user_cat", "item_id", "item_cat", "genres"):
            changed = vm(dataclasses.replace(batch, **{name: getattr(other, name)}), z, mask)
            assert not torch.allclose(changed, base), f"output ignores {name}"


def test_output_depends_on_z_only_where_present(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    vm = _vm(spec)
    batch = make_batch(8)
    z, mask = _tiers(8)
    noise = torch.randn(z.shape, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        base = vm(batch, z, mask)
        # garbage in the missing tiers' codes changes nothing
        masked_out = z + noise * (1 - mask).unsqueeze(-1)
        torch.testing.assert_close(vm(batch, masked_out, mask), base)
        # changing a present tier's code changes exactly the rows where it is present
        for t in range(N_TIERS):
            bumped = z.clone()
            bumped[:, t] += noise[:, t]
            out = vm(batch, bumped, mask)
            present = mask[:, t].bool()
            torch.testing.assert_close(out[~present], base[~present])
            assert (out[present] - base[present]).abs().amax(dim=1).gt(0).all()


def test_mask_is_an_input(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    vm = _vm(spec)
    batch = make_batch(4)
    zeros = torch.zeros(4, N_TIERS, Z_DIM)
    with torch.no_grad():
        missing = vm(batch, zeros, torch.zeros(4, N_TIERS))
        present = vm(batch, zeros, torch.ones(4, N_TIERS))
    assert not torch.allclose(missing, present)


def test_no_tier_args_means_all_missing(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    vm = _vm(spec)
    batch = make_batch(5)
    with torch.no_grad():
        torch.testing.assert_close(
            vm(batch), vm(batch, torch.zeros(5, N_TIERS, Z_DIM), torch.zeros(5, N_TIERS))
        )


def test_rejects_bad_tier_args(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    batch = make_batch(4)
    z, mask = _tiers(4)
    with pytest.raises(ValueError):
        _vm(spec, n_tiers=0)(batch, z, mask)
    with pytest.raises(ValueError):
        _vm(spec, n_tiers=0)(batch, tier_mask=mask)
    vm = _vm(spec)
    with pytest.raises(ValueError):
        vm(batch, z)
    with pytest.raises(ValueError):
        vm(batch, tier_mask=mask)
    with pytest.raises(ValueError):
        vm(batch, z[:, :2], mask[:, :2])
    with pytest.raises(ValueError):
        vm(batch, z[..., :2], mask)
    with pytest.raises(ValueError):
        vm(batch, z[:3], mask[:3])
    with pytest.raises(ValueError):
        vm(batch, z, mask[:, :2])


def test_backward_reaches_every_part(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    vm = _vm(spec).train()
    z, mask = _tiers(16)
    mask[2] = 1.0
    vm(make_batch(16), z, mask).sum().backward()
    assert not [n for n, p in vm.named_parameters() if p.grad is None]


def test_is_deterministic_per_seed(spec: FeatureSpec, make_batch: MakeBatch) -> None:
    batch = make_batch(6)
    z, mask = _tiers(6)
    with torch.no_grad():
        a = _vm(spec, seed=2)(batch, z, mask)
        b = _vm(spec, seed=2)(batch, z, mask)
        c = _vm(spec, seed=3)(batch, z, mask)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(a, c)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_tiers": -1},
        {"z_dim": 0},
        {"embed_dim": 0},
        {"embed_dim": -4},
        {"hidden": 0},
        {"n_tasks": 0},
    ],
)
def test_rejects_bad_arguments(spec: FeatureSpec, kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        VerticalModel(spec, **kwargs)


def test_rejects_bad_spec(spec: FeatureSpec) -> None:
    with pytest.raises(ValueError):
        VerticalModel(dataclasses.replace(spec, n_items=0))
    with pytest.raises(ValueError):
        VerticalModel(dataclasses.replace(spec, user_cat_cardinalities=(0,)))


# --- tier_dropout -------------------------------------------------------------------------


def _full_tiers(rows: int, n_tiers: int = N_TIERS) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(rows, n_tiers, Z_DIM, generator=g) + 10, torch.ones(rows, n_tiers)


@pytest.mark.parametrize("keep", [0.0, 0.25, 0.4, 0.9, 1.0])
def test_tier_dropout_keeps_about_keep(keep: float) -> None:
    z, mask = _full_tiers(20_000)
    new_z, new_mask = tier_dropout(z, mask, keep, torch.Generator().manual_seed(0))
    share = new_mask.mean(dim=0)  # per tier
    torch.testing.assert_close(share, torch.full((N_TIERS,), keep), atol=0.015, rtol=0)
    # z is zeroed exactly where the tier was dropped, untouched where kept
    kept = new_mask.bool()
    torch.testing.assert_close(new_z[kept], z[kept])
    assert (new_z[~kept] == 0).all()


def test_tier_dropout_per_tier_keep() -> None:
    keeps = [1.0, 0.0, 0.5, 0.2]
    z, mask = _full_tiers(20_000)
    _, new_mask = tier_dropout(z, mask, keeps, torch.Generator().manual_seed(1))
    torch.testing.assert_close(new_mask.mean(0), torch.tensor(keeps), atol=0.015, rtol=0)


def test_tier_dropout_draws_independently() -> None:
    z, mask = _full_tiers(20_000, n_tiers=2)
    _, new_mask = tier_dropout(z, mask, 0.5, torch.Generator().manual_seed(2))
    both = (new_mask[:, 0] * new_mask[:, 1]).mean().item()
    assert abs(both - 0.25) < 0.015


def test_tier_dropout_never_makes_a_missing_tier_present() -> None:
    z, mask = _tiers(5_000)
    new_z, new_mask = tier_dropout(z, mask, 1.0, torch.Generator().manual_seed(0))
    torch.testing.assert_close(new_mask, mask)
    torch.testing.assert_close(new_z, z)
    # (a seed other than _tiers' own, whose draws would match the mask's exactly)
    new_z, new_mask = tier_dropout(z, mask, 0.5, torch.Generator().manual_seed(123))
    assert (new_mask <= mask).all()
    assert (new_z[~mask.bool()] == 0).all()
    # among present tiers about half survive
    assert abs(new_mask.sum().item() / mask.sum().item() - 0.5) < 0.03


def test_tier_dropout_is_pure_and_seeded() -> None:
    z, mask = _tiers(100)
    z0, mask0 = z.clone(), mask.clone()
    a = tier_dropout(z, mask, 0.5, torch.Generator().manual_seed(7))
    b = tier_dropout(z, mask, 0.5, torch.Generator().manual_seed(7))
    c = tier_dropout(z, mask, 0.5, torch.Generator().manual_seed(8))
    torch.testing.assert_close(z, z0)
    torch.testing.assert_close(mask, mask0)
    assert a[0] is not z and a[1] is not mask
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a[1], c[1])


def test_tier_dropout_keeps_mask_dtype() -> None:
    z, mask = _tiers(10)
    _, new_mask = tier_dropout(z, mask.bool(), 0.5)
    assert new_mask.dtype == torch.bool
    _, new_mask = tier_dropout(z, mask, 0.5)
    assert new_mask.dtype == mask.dtype


@pytest.mark.parametrize("keep", [-0.1, 1.5, [0.5, 0.5], [0.5] * 5, [0.5, 0.5, 2.0, 0.5]])
def test_tier_dropout_rejects_bad_keep(keep: float | list[float]) -> None:
    z, mask = _tiers(4)
    with pytest.raises(ValueError):
        tier_dropout(z, mask, keep)


def test_tier_dropout_rejects_bad_shapes() -> None:
    z, mask = _tiers(4)
    with pytest.raises(ValueError):
        tier_dropout(z[:, :, 0], mask, 0.5)
    with pytest.raises(ValueError):
        tier_dropout(z, mask[:, :2], 0.5)


# --- the user-aware VM ---------------------------------------------------------------------


def test_the_user_aware_vm_reads_the_users_last_items(
    spec: FeatureSpec, make_batch: MakeBatch
) -> None:
    torch.manual_seed(0)
    vm = VerticalModel(spec, embed_dim=8, hidden=16, history_summary=True).eval()
    batch, other = make_batch(8), make_batch(8, seed=1)
    with torch.no_grad():
        base = vm(batch)
        changed = vm(dataclasses.replace(batch, hist_items=other.hist_items))
        assert not torch.allclose(changed, base), "output ignores hist_items"
        for name in ("kg", "hist_ratings"):
            same = vm(dataclasses.replace(batch, **{name: getattr(other, name)}))
            torch.testing.assert_close(same, base)


def test_the_user_aware_vm_needs_a_history(spec: FeatureSpec) -> None:
    with pytest.raises(ValueError, match="history_len"):
        VerticalModel(dataclasses.replace(spec, history_len=0), history_summary=True)
