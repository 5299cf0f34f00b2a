"""Serving: one Feast call per request, tier fallback, training sets that match serving."""

from solaris.serving.client import SolarisFeatures, current_fm_version
from solaris.serving.tiers import TIERS, TierFeatures, assemble_tiers
from solaris.serving.training_export import read_training_set, write_training_set
from solaris.serving.training_set import build_training_set

__all__ = [
    "TIERS",
    "SolarisFeatures",
    "TierFeatures",
    "assemble_tiers",
    "build_training_set",
    "current_fm_version",
    "read_training_set",
    "write_training_set",
]
