"""The MovieLens-100K example: what ``make demo`` runs, and the template for your own.

Everything MovieLens lives here: the loader (:mod:`.data`, :mod:`.fetch`), the request-log
builder (:mod:`.requests`), the features (:mod:`.features`), the FM/VM training
(:mod:`.train`), the demo's offline stage (:mod:`.demo`), ``solaris replay``
(:mod:`.replay`) and the paper's report (:mod:`.report`). Nothing else under ``solaris/``
imports it. The adapters (:mod:`.adapters`) are re-exported here.

What ``make demo`` runs on, and the template for bringing your own:

- :func:`foundation_model`: the multi-task :class:`~solaris.models.fm.FoundationModel`
  with its MovieLens features (:class:`~solaris.examples.movielens.features.FeatureContext`);
- :func:`traffic`: the request log the demo builds from the ratings (1-minute requests,
  causal retrieval candidates), with the score the VM gave each candidate, as a production
  serving stack would have logged it;
- :func:`vm_verifier`: re-scores candidates with the VM in force (an alternative to the
  default logged scores);
- :func:`vm_trainer`: the training DAG's work, retraining the VM on point-in-time SOLARIS
  features and publishing it only when no worse.

Configured as::

    model:
      foundation: "solaris.examples.movielens:foundation_model"
      trainer: "solaris.examples.movielens:vm_trainer"
    requests:
      source: "solaris.examples.movielens:traffic"
"""

from solaris.examples.movielens.adapters import *  # noqa: F403 (the adapters, re-exported)
from solaris.examples.movielens.adapters import __all__  # noqa: F401
