"""SOLARIS: speculative offloading of foundation-model embeddings to a vertical recommender."""

__all__ = ["__version__"]

__version__ = "0.1.0"
