"""The autoencoder that compresses the FM's last shared layer ``h`` into the code ``z``.

SOLARIS stores and serves ``z`` (``z_dim`` floats) rather than ``h`` (``shared_dim``
floats); the vertical model reads ``z`` as a feature.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from solaris.models import ModelInputError

__all__ = ["Autoencoder"]


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelInputError(f"{name} must be a positive int, got {value!r}")


class Autoencoder(nn.Module):
    """An MLP autoencoder on standardised ``h``.

    ``encode`` standardises its input with the per-feature ``mean`` and ``std`` buffers
    before the encoder; ``decode`` maps back to the scale of ``h``. The buffers start as
    the identity (mean 0, std 1) and are set from training data by ``fit_scaler``, once,
    before training; they are saved in the ``state_dict`` with the weights, so a reloaded
    model encodes the same way. ``reconstruction_loss`` is the MSE in the standardised
    space, so every feature of ``h`` counts alike whatever its scale.

    Parts: ``encoder`` (``in_dim -> hidden -> z_dim``), ``decoder``
    (``z_dim -> hidden -> in_dim``), each ``Linear -> ReLU -> Linear``; ``z`` is linear
    (unbounded).

    Args:
        in_dim (int): width of ``h``.
        z_dim (int): width of the code ``z``.
        hidden (int): hidden width of the encoder and the decoder.

    Call args:
        h (torch.Tensor): ``[B, in_dim]``.

    Returns:
        tuple[torch.Tensor, torch.Tensor]: ``z`` ``[B, z_dim]`` and the reconstruction
        ``h_hat`` ``[B, in_dim]`` (on the scale of ``h``).

    Example::

        >>> ae = Autoencoder(in_dim=16, z_dim=4, hidden=8)
        >>> h = torch.randn(32, 16) * 3 + 1
        >>> ae = ae.fit_scaler(h)
        >>> z, h_hat = ae(h)
        >>> z.shape, h_hat.shape, ae.reconstruction_loss(h).shape
        (torch.Size([32, 4]), torch.Size([32, 16]), torch.Size([]))
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, in_dim: int, z_dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        _check_positive("in_dim", in_dim)
        _check_positive("z_dim", z_dim)
        _check_positive("hidden", hidden)
        self.in_dim = in_dim
        self.z_dim = z_dim
        self.hidden = hidden
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, z_dim))
        self.decoder = nn.Sequential(nn.Linear(z_dim, hidden), nn.ReLU(), nn.Linear(hidden, in_dim))
        self.register_buffer("mean", torch.zeros(in_dim))
        self.register_buffer("std", torch.ones(in_dim))

    def _check_h(self, h: torch.Tensor) -> None:
        if h.dim() != 2 or h.shape[1] != self.in_dim:
            raise ModelInputError(f"h must have shape [B, {self.in_dim}], got {list(h.shape)}")

    @torch.no_grad()
    def fit_scaler(self, h: torch.Tensor, eps: float = 1e-6) -> Autoencoder:
        """Sets ``mean`` and ``std`` to the per-feature statistics of ``h``.

        A feature whose std is below ``eps`` (e.g. a dead ReLU unit) gets std 1, so it is
        only centred.

        Args:
            h (torch.Tensor): ``[N, in_dim]`` training rows, ``N >= 1``.
            eps (float): smallest std treated as non-constant.

        Returns:
            Autoencoder: ``self``.
        """
        self._check_h(h)
        if h.shape[0] == 0:
            raise ModelInputError("fit_scaler needs at least one row")
        h = h.to(self.mean.dtype)
        mean = h.mean(dim=0)  # (in_dim,)
        std = h.std(dim=0, unbiased=False)  # (in_dim,)
        std = torch.where(std > eps, std, torch.ones_like(std))
        self.mean.copy_(mean)
        self.std.copy_(std)
        return self

    def normalise(self, h: torch.Tensor) -> torch.Tensor:
        """``(h - mean) / std``: ``[B, in_dim] -> [B, in_dim]``."""
        return (h - self.mean) / self.std

    def denormalise(self, x: torch.Tensor) -> torch.Tensor:
        """``x * std + mean``: ``[B, in_dim] -> [B, in_dim]``."""
        return x * self.std + self.mean

    def encode(self, h: torch.Tensor) -> torch.Tensor:
        """
        Args:
            h (torch.Tensor): ``[B, in_dim]`` on the scale of the FM's ``h``.

        Returns:
            torch.Tensor: ``z``, ``[B, z_dim]``.
        """
        self._check_h(h)
        return self.encoder(self.normalise(h))  # (B, z_dim)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """
        Args:
            z (torch.Tensor): ``[B, z_dim]``.

        Returns:
            torch.Tensor: ``h_hat``, ``[B, in_dim]`` on the scale of ``h``.
        """
        return self.denormalise(self.decoder(z))  # (B, in_dim)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """
        Args:
            h (torch.Tensor): ``[B, in_dim]``.

        Returns:
            tuple[torch.Tensor, torch.Tensor]: ``z`` ``[B, z_dim]``, ``h_hat`` ``[B, in_dim]``.
        """
        z = self.encode(h)  # (B, z_dim)
        return z, self.decode(z)

    def reconstruction_loss(self, h: torch.Tensor) -> torch.Tensor:
        """Mean squared error between standardised ``h`` and its standardised reconstruction.

        Args:
            h (torch.Tensor): ``[B, in_dim]``.

        Returns:
            torch.Tensor: scalar.
        """
        self._check_h(h)
        target = self.normalise(h)  # (B, in_dim)
        recon = self.decoder(self.encoder(target))  # (B, in_dim)
        return F.mse_loss(recon, target)
