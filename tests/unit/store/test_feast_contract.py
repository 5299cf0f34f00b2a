"""Feast internals that ``solaris/store/online.py`` and ``response.py`` rely on.

The online store calls Feast's private ``feast.utils._get_cached_request_context`` and
unpacks its 9-tuple by position, overrides ``OnlineStore`` methods that Feast calls with
keyword arguments, and subclasses ``OnlineResponse`` without running its ``__init__``.
Feast is pinned (0.67); these tests fail loudly when an upgrade moves any of it, instead of
the store misreading a request at run time.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import textwrap
from collections.abc import Callable

import pytest
from feast import utils
from feast.feature_view_projection import FeatureViewProjection
from feast.infra.online_stores.online_store import OnlineStore
from feast.online_response import OnlineResponse

from solaris.store.online import SolarisOnlineStore
from solaris.store.response import SolarisOnlineResponse

CONTEXT_ORDER = (
    "feature_refs",
    "requested_on_demand_feature_views",
    "entity_name_to_join_key_map",
    "entity_type_map",
    "join_keys_set",
    "grouped_refs",
    "requested_result_row_names",
    "needed_request_data",
    "entityless_case",
)
"""The request context, in the order ``SolarisOnlineStore._plan`` unpacks it."""

USED_BY_ONLINE_PY = {
    "on_demand": "requested_on_demand_feature_views",
    "entity_name_to_join_key": "entity_name_to_join_key_map",
    "grouped_refs": "grouped_refs",
    "entityless": "entityless_case",
}
"""The names ``_plan`` gives the context entries it reads → Feast's names for them."""


def _function_ast(func: Callable) -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _names(node: ast.expr) -> list[str]:
    """The variable names of a tuple expression's elements (an element that is not a plain
    name gives every name it uses, joined by ``|``)."""
    assert isinstance(node, ast.Tuple), ast.dump(node)
    out = []
    for element in node.elts:
        if isinstance(element, ast.Name):
            out.append(element.id)
        else:
            out.append("|".join(n.id for n in ast.walk(element) if isinstance(n, ast.Name)))
    return out


def _unpacking_of(func: ast.FunctionDef, source_name: str) -> list[str]:
    """The target names of ``(a, b, ...) = <source_name>`` in ``func``."""
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and node.value.id == source_name
            and isinstance(node.targets[0], ast.Tuple)
        ):
            return _names(node.targets[0])
    raise AssertionError(f"{func.name} does not unpack {source_name!r}")


def test_feast_is_the_pinned_0_67_release() -> None:
    assert importlib.metadata.version("feast").startswith("0.67.")


def test_get_cached_request_context_exists_with_the_called_signature() -> None:
    func = getattr(utils, "_get_cached_request_context", None)
    assert callable(func), "feast.utils._get_cached_request_context is gone"
    params = list(inspect.signature(func).parameters)
    assert params == ["registry", "project", "features", "full_feature_names"]


def test_get_online_request_context_returns_the_nine_entries_in_order() -> None:
    func = _function_ast(utils._get_online_request_context)
    last = func.body[-1]
    assert isinstance(last, ast.Return) and last.value is not None, "no final return"
    # Feast names its local copy of the refs ``_feature_refs``.
    assert tuple(n.lstrip("_") for n in _names(last.value)) == CONTEXT_ORDER


def test_get_cached_request_context_passes_the_context_through_in_order() -> None:
    func = _function_ast(utils._get_cached_request_context)
    assert tuple(_unpacking_of(func, "ctx")) == CONTEXT_ORDER
    result = next(
        node.value
        for node in ast.walk(func)
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == "result"
    )
    names = _names(result)
    assert len(names) == len(CONTEXT_ORDER)
    for expected, got in zip(CONTEXT_ORDER, names, strict=True):
        assert expected in got.split("|"), (expected, got)
    returned = {
        n.value.id
        for n in ast.walk(func)
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)
    }
    assert returned <= {"result", "cached"}


def test_online_store_unpacks_the_context_positions_it_reads() -> None:
    func = _function_ast(SolarisOnlineStore._plan)
    names = _unpacking_of(func, "context")
    assert len(names) == len(CONTEXT_ORDER)
    for ours, feasts in USED_BY_ONLINE_PY.items():
        assert CONTEXT_ORDER[names.index(ours)] == feasts


@pytest.mark.parametrize(
    "method",
    ["get_online_features", "online_read", "online_write_batch", "update", "teardown"],
)
def test_overridden_online_store_methods_keep_feasts_parameter_names(method: str) -> None:
    base = getattr(OnlineStore, method, None)
    assert base is not None, f"OnlineStore.{method} is gone"
    ours = inspect.signature(getattr(SolarisOnlineStore, method))
    theirs = inspect.signature(base)
    assert list(ours.parameters) == list(theirs.parameters)
    for name, param in theirs.parameters.items():
        if param.default is not inspect.Parameter.empty:
            assert ours.parameters[name].default == param.default, name


def test_get_online_features_takes_the_keywords_the_store_passes_back_to_feast() -> None:
    params = inspect.signature(OnlineStore.get_online_features).parameters
    assert list(params) == [
        "self",
        "config",
        "features",
        "entity_rows",
        "registry",
        "project",
        "full_feature_names",
        "include_feature_view_version_metadata",
    ]


def test_feature_view_projection_has_what_the_fast_path_reads() -> None:
    assert callable(getattr(FeatureViewProjection, "name_to_use", None))
    fields = inspect.signature(FeatureViewProjection).parameters
    assert "join_key_map" in fields


def test_online_response_has_the_conversions_the_solaris_response_overrides() -> None:
    for method in ("to_dict", "to_df", "to_arrow"):
        assert callable(getattr(OnlineResponse, method, None)), method
        assert method in SolarisOnlineResponse.__dict__, method
        ours = inspect.signature(getattr(SolarisOnlineResponse, method))
        theirs = inspect.signature(getattr(OnlineResponse, method))
        assert list(ours.parameters) == list(theirs.parameters)


def _self_attributes(func: Callable) -> set[str]:
    node = _function_ast(func)
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }


def test_online_response_init_sets_only_attributes_the_solaris_response_provides() -> None:
    """SolarisOnlineResponse skips the base ``__init__``: whatever it sets must exist."""
    for attr in _self_attributes(OnlineResponse.__init__):
        assert attr in SolarisOnlineResponse.__dict__, attr


def test_inherited_online_response_methods_only_use_what_the_solaris_response_has() -> None:
    inherited = [
        name
        for name, member in inspect.getmembers(OnlineResponse, inspect.isfunction)
        if not name.startswith("__") and name not in SolarisOnlineResponse.__dict__
    ]
    assert "to_tensor" in inherited  # reaches the data through self.proto / self.to_dict
    for name in inherited:
        for attr in _self_attributes(getattr(OnlineResponse, name)):
            provided = attr in SolarisOnlineResponse.__dict__ or callable(
                getattr(OnlineResponse, attr, None)
            )
            assert provided, f"OnlineResponse.{name} uses self.{attr}"
    assert "proto" in _self_attributes(OnlineResponse.to_tensor)


def test_store_settings_feast_rejects_are_named_without_the_redis_password() -> None:
    from solaris.config import SolarisConfig
    from solaris.store.feast_store import FeatureStoreError, open_feature_store

    with pytest.raises(FeatureStoreError, match="bogus_option") as info:
        open_feature_store(
            SolarisConfig(), "localhost:6379,password=s3cr3t-x", online={"bogus_option": 1}
        )
    assert "s3cr3t-x" not in str(info.value) and "password=***" in str(info.value)
