"""SOLARIS: speculative offloading of foundation-model embeddings to a vertical recommender."""

__version__ = "0.1.0"
