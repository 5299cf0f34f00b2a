"""The MovieLens example's adapter settings: what makes a configuration run this example.

The product's settings name no adapter by default (an adopter who forgets one gets a
:class:`~solaris.errors.ConfigError`, not MovieLens). The example's commands (``solaris
demo``, ``replay``, ``report``) fill in these where the settings they load name none, and
``make airflow`` exports them as ``SOLARIS_*`` variables when no ``SOLARIS_CONFIG`` is given
(``python -m solaris.examples.movielens.settings`` prints them). A setting given in a file,
a variable or an override is kept.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = ["ADAPTERS", "environment", "with_adapters"]

ADAPTERS: dict[str, dict[str, str]] = {
    "model": {
        "foundation": "solaris.examples.movielens:foundation_model",
        "trainer": "solaris.examples.movielens:vm_trainer",
    },
    "requests": {"source": "solaris.examples.movielens:traffic"},
}
"""The example's adapters by settings section: its FM, its VM trainer and its traffic."""


def with_adapters(cfg: SolarisConfig) -> SolarisConfig:
    """``cfg`` with the example's adapters wherever it names none."""
    update = {}
    for section, values in ADAPTERS.items():
        current = getattr(cfg, section)
        unset = {name: path for name, path in values.items() if getattr(current, name) is None}
        if unset:
            update[section] = current.model_copy(update=unset)
    return cfg.model_copy(update=update) if update else cfg


def environment() -> dict[str, str]:
    """The example's adapters as the ``SOLARIS_<SECTION>__<NAME>`` variables that set them."""
    from solaris.config import env_variable

    return {
        env_variable(f"{section}.{name}"): path
        for section, values in ADAPTERS.items()
        for name, path in values.items()
    }


if __name__ == "__main__":
    sys.stdout.write("".join(f"{name}={value}\n" for name, value in environment().items()))
