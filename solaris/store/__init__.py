"""Feature-store plumbing: the storage contract, the SOLARIS online store, and which Redis.

Heavy modules (Feast) are imported only where a store is opened: ``solaris.store.online``,
``solaris.store.response`` and ``solaris.store.feast_store``'s functions.
"""

from solaris.store.contract import (
    FEATURE_SERVICE,
    SERVING_VIEWS,
    VIEWS,
    InvalidWriteError,
    ViewParams,
    ViewSpec,
)

__all__ = [
    "FEATURE_SERVICE",
    "SERVING_VIEWS",
    "VIEWS",
    "InvalidWriteError",
    "ViewParams",
    "ViewSpec",
]
