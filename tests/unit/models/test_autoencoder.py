"""Tests for ``solaris.models.autoencoder``."""

from __future__ import annotations

import pytest
import torch

from solaris.models.autoencoder import Autoencoder


def _low_rank(n: int, dim: int, rank: int, seed: int = 0) -> torch.Tensor:
    """``[n, dim]`` rank-``rank`` data with per-feature offsets and scales."""
    g = torch.Generator().manual_seed(seed)
    factors = torch.randn(n, rank, generator=g) @ torch.randn(rank, dim, generator=g)
    return factors * torch.rand(dim, generator=g) * 5 + torch.randn(dim, generator=g) * 3


def test_shapes() -> None:
    ae = Autoencoder(in_dim=24, z_dim=6, hidden=16)
    h = torch.randn(10, 24)
    z, h_hat = ae(h)
    assert z.shape == (10, 6)
    assert h_hat.shape == (10, 24)
    assert ae.encode(h).shape == (10, 6)
    assert ae.decode(z).shape == (10, 24)
    loss = ae.reconstruction_loss(h)
    assert loss.shape == ()
    assert torch.isfinite(loss)


def test_default_sizes() -> None:
    ae = Autoencoder(in_dim=128)
    z, h_hat = ae(torch.randn(3, 128))
    assert z.shape == (3, 32)
    assert h_hat.shape == (3, 128)


def test_z_dim_may_exceed_in_dim() -> None:
    z, h_hat = Autoencoder(in_dim=4, z_dim=8, hidden=4)(torch.randn(2, 4))
    assert z.shape == (2, 8)
    assert h_hat.shape == (2, 4)


def test_forward_is_encode_then_decode() -> None:
    torch.manual_seed(0)
    ae = Autoencoder(in_dim=12, z_dim=4, hidden=8).fit_scaler(_low_rank(50, 12, 3))
    h = _low_rank(7, 12, 3, seed=1)
    z, h_hat = ae(h)
    torch.testing.assert_close(z, ae.encode(h))
    torch.testing.assert_close(h_hat, ae.decode(ae.encode(h)))


def test_fit_scaler_sets_buffers_and_standardises() -> None:
    h = _low_rank(200, 10, 3)
    h[:, 4] = 7.0  # a constant feature
    ae = Autoencoder(in_dim=10, z_dim=3)
    assert ae.fit_scaler(h) is ae
    assert {name for name, _ in ae.named_buffers()} == {"mean", "std"}
    torch.testing.assert_close(ae.mean, h.mean(0))
    assert ae.std[4] == 1.0  # constant feature is only centred
    x = ae.normalise(h)
    assert torch.isfinite(x).all()
    torch.testing.assert_close(x.mean(0), torch.zeros(10), atol=1e-5, rtol=0)
    keep = [i for i in range(10) if i != 4]
    torch.testing.assert_close(x[:, keep].std(0, unbiased=False), torch.ones(9), atol=1e-4, rtol=0)
    torch.testing.assert_close(ae.denormalise(x), h, atol=1e-4, rtol=1e-5)


def test_scaler_travels_in_the_state_dict() -> None:
    h = _low_rank(100, 8, 2)
    ae = Autoencoder(in_dim=8, z_dim=2).fit_scaler(h)
    clone = Autoencoder(in_dim=8, z_dim=2)
    clone.load_state_dict(ae.state_dict())
    torch.testing.assert_close(clone.encode(h), ae.encode(h))


def test_decode_is_on_the_scale_of_h() -> None:
    """With a zero decoder the reconstruction is the fitted mean, not zero."""
    h = _low_rank(100, 8, 2)
    ae = Autoencoder(in_dim=8, z_dim=2).fit_scaler(h)
    last = ae.decoder[-1]
    torch.nn.init.zeros_(last.weight)
    torch.nn.init.zeros_(last.bias)
    torch.testing.assert_close(ae.decode(torch.randn(5, 2)), h.mean(0).expand(5, 8))


def test_training_reduces_reconstruction_loss_on_low_rank_data() -> None:
    torch.manual_seed(0)
    h = _low_rank(256, 32, rank=4)
    ae = Autoencoder(in_dim=32, z_dim=8, hidden=32).fit_scaler(h)
    opt = torch.optim.Adam(ae.parameters(), lr=1e-2)
    with torch.no_grad():
        before = ae.reconstruction_loss(h).item()
    for _ in range(300):
        opt.zero_grad()
        loss = ae.reconstruction_loss(h)
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = ae.reconstruction_loss(h).item()
    assert after < 0.1 * before, (before, after)
    assert after < 0.1  # standardised features: < 10% of the variance left


def test_is_deterministic_per_seed() -> None:
    h = torch.randn(5, 16)
    torch.manual_seed(1)
    a = Autoencoder(16, 4)(h)[0]
    torch.manual_seed(1)
    b = Autoencoder(16, 4)(h)[0]
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("in_dim", "z_dim", "hidden"), [(0, 4, 8), (-1, 4, 8), (8, 0, 8), (8, -3, 8), (8, 4, 0)]
)
def test_rejects_bad_arguments(in_dim: int, z_dim: int, hidden: int) -> None:
    with pytest.raises(ValueError):
        Autoencoder(in_dim, z_dim, hidden)


def test_rejects_wrong_width() -> None:
    ae = Autoencoder(in_dim=8, z_dim=2)
    with pytest.raises(ValueError):
        ae.encode(torch.randn(3, 9))
    with pytest.raises(ValueError):
        ae.fit_scaler(torch.randn(8))
    with pytest.raises(ValueError):
        ae.fit_scaler(torch.randn(0, 8))
