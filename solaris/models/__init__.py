"""What every FM's codes go through: the autoencoder (:mod:`.autoencoder`), versioned
checkpoints (:mod:`.checkpoints`) and the torch device and seeds (:mod:`.device`).

An FM and a VM are the adopter's (``solaris.adapters``); the MovieLens example's live in
``solaris.examples.movielens.models``. :class:`ModelInputError` lives here, not beside one
model, so that the autoencoder and the embedding path raise it without importing a model.
"""

from solaris.errors import SolarisError

__all__ = ["ModelInputError"]


class ModelInputError(SolarisError, ValueError):
    """A model given an argument or input it cannot use: a size, shape, task or setting."""
