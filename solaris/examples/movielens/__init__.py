"""The MovieLens-100K example: what ``make demo`` runs, and the template for your own.

Everything MovieLens lives here: the loader (:mod:`.data`, :mod:`.fetch`), the request-log
builder (:mod:`.requests`), the features (:mod:`.features`), the FM/VM training
(:mod:`.train`), the demo's offline stage (:mod:`.demo`), ``solaris replay``
(:mod:`.replay`) and the paper's report (:mod:`.report`). Nothing else under ``solaris/``
imports it. The adapters (:mod:`.adapters`) are re-exported here.

What ``make demo`` runs on, and the template for bringing your own:

- :func:`foundation_model`: the multi-task
  :class:`~solaris.examples.movielens.models.fm.FoundationModel` with its MovieLens
  features (:class:`~solaris.examples.movielens.features.FeatureContext`);
- :func:`traffic`: the request log the demo builds from the ratings (1-minute requests,
  causal retrieval candidates), with the score the VM gave each candidate, as a production
  serving stack would have logged it;
- :func:`vm_verifier`: re-scores candidates with the VM in force (an alternative to the
  default logged scores);
- :func:`vm_trainer`: the training DAG's work, retraining the VM on point-in-time SOLARIS
  features and publishing it only when no worse.

Configured as (:data:`.settings.ADAPTERS`, which the example's commands and ``make airflow``
fill in where the settings name no adapter; the product has no default)::

    model:
      foundation: "solaris.examples.movielens:foundation_model"
      trainer: "solaris.examples.movielens:vm_trainer"
    requests:
      source: "solaris.examples.movielens:traffic"
"""

from typing import Any

# The adapters, re-exported, but imported only when one is asked for: the `solaris` command
# loads this package for its example commands (solaris.examples.movielens.cli), and an
# eager import would bring numpy and pandas into every command's start-up.
__all__ = [
    "MovieLensFoundationModel",
    "MovieLensTraffic",
    "VMTrainer",
    "VMVerifier",
    "foundation_model",
    "publish_verifier",
    "published_checkpoint",
    "request_log_path",
    "traffic",
    "vm_trainer",
    "vm_verifier",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from solaris.examples.movielens import adapters

        return getattr(adapters, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
