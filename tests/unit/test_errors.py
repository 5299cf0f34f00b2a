"""One error tree: every exception class the project defines derives from SolarisError and
keeps a built-in base, and the tree in solaris.errors' docstring names each of them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import solaris
from solaris import errors
from solaris.errors import SolarisError

# The built-in bases a project exception keeps: bad input, a failed step, a wrong type, a
# name that is not there, a missing file.
_BUILTIN_BASES = (ValueError, RuntimeError, TypeError, LookupError, OSError)


def _project_exceptions() -> list[type[BaseException]]:
    found = {}
    for info in pkgutil.walk_packages(solaris.__path__, "solaris."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("solaris."):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_project_exception_is_a_solaris_error_with_a_builtin_base() -> None:
    classes = _project_exceptions()
    assert len(classes) >= 15
    for cls in classes:
        assert issubclass(cls, SolarisError), cls
        if cls is not SolarisError:
            assert issubclass(cls, _BUILTIN_BASES), cls


def test_the_documented_tree_names_every_project_exception() -> None:
    for cls in _project_exceptions():
        assert re.search(rf"\b{cls.__name__}\b", errors.__doc__), cls
