"""The Feast CLI's edge: ``feast plan | apply | materialize | serve | teardown`` on this repo.

The Feast CLI imports every module of the repo and collects the objects they define at
module level. This file is that edge and nothing else: it builds the settings once, from
``SOLARIS_*`` environment variables and ``$SOLARIS_CONFIG`` (as the ``solaris`` command
does), and defines the views with them. The library never imports it; it calls
``solaris_features.definitions(cfg)`` with the configuration it was given.
"""

from solaris_features import definitions

from solaris.config import SolarisConfig

globals().update({obj.name: obj for obj in definitions(SolarisConfig.load())})
