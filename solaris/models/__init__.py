"""The models: the autoencoder every FM's codes go through, the training loop, and the
MovieLens example's FM and VM (:mod:`.fm`, :mod:`.vm`).

:class:`ModelInputError` lives here, not beside one model, so that the autoencoder and the
embedding path raise it without importing the example's FM.
"""

from solaris.errors import SolarisError

__all__ = ["ModelInputError"]


class ModelInputError(SolarisError, ValueError):
    """A model given an argument or input it cannot use: a size, shape, task or setting."""
