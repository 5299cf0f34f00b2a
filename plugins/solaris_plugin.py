"""The SOLARIS page of the Airflow UI: an operator's view of what the cycle's DAG runs did.

An Airflow 3 plugin that mounts a small FastAPI app in the api-server under ``/solaris`` and
adds a "SOLARIS" entry to the UI's navigation bar. It reads the run records that the tasks
write (``artifacts_dir/namespaces/<namespace>/runs/<dag_id>/<key>.json``, see
:func:`solaris.orchestration.layout.write_run_record`) and shows, for one namespace at a time:

* plots over time, drawn here as inline SVG (no script, no network): coverage per serving
  tier, embedding freshness, FM passes per 1,000 requests, selected vs candidates, rows
  written per view, fetch latency p50/p99, serving failures, the miss-stream and
  request-log backlogs (the serving figures come from the ``serving`` dict of the candidates
  runs; a run without it has no point) and the near-line path's pairs/s, lag p95 and backlog
  (the ``nearline`` dict the candidates run reads from the embedders' status);
* per DAG, a table with one row per run, every figure formatted (nested figures as
  ``key: value`` lists, never a raw dict).

Routes (both behind Airflow's auth manager, see :func:`dag_run_reader`):

* ``GET /solaris/``          the HTML page (plain HTML and inline CSS, no script);
* ``GET /solaris/api/runs``  the same records as JSON.

Both take the query parameters ``namespace``, ``dag_id``, ``from`` and ``to`` (UTC, ISO 8601
date or date and time, or epoch seconds; a run is in range when its interval *end* is). The
live cycle and replays never share a view: the page shows one namespace, by default the live
one (``$SOLARIS_NAMESPACE``, default ``live``) when it has runs, and its selector lists the
others, replays labelled as such.

The settings are built on every request as every task builds them (``SolarisConfig.load``:
``$SOLARIS_CONFIG`` and the ``SOLARIS_*`` variables): the state root is ``cycle.state_uri``
(a folder or an fsspec URL), else ``artifacts_dir`` (default ``artifacts``, relative to the
api-server's working directory). This module runs inside the api-server, so it imports
nothing heavy: no feast, torch or pandas (``solaris.config`` is pydantic only).

This file is the wiring only: the Airflow plugin, its routes and the auth manager. What the
page shows is :mod:`solaris.dashboard`'s, pure functions importable without Airflow: the
query parameters (:mod:`~solaris.dashboard.filters`, times by :func:`solaris.times.epoch_of`),
which records are shown (:mod:`~solaris.dashboard.records`, read only through
:func:`solaris.orchestration.layout.read_all_run_records`), the plots
(:mod:`~solaris.dashboard.plots`, drawn by :mod:`~solaris.dashboard.charts`), the tables
(:mod:`~solaris.dashboard.tables`, figures by :mod:`~solaris.dashboard.formatting`) and the
page (:mod:`~solaris.dashboard.page`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from solaris.dashboard.filters import FilterError, Filters, parse_filters
from solaris.dashboard.page import render_page
from solaris.dashboard.records import load_runs, select_runs
from solaris.files import StatePath, state_path

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = [
    "DagFilter",
    "SolarisPlugin",
    "app",
    "artifacts_dir",
    "create_app",
    "dag_run_reader",
    "live_namespace",
    "settings",
]


def settings() -> SolarisConfig:
    """The deployment's settings, built as every task builds them: ``$SOLARIS_CONFIG`` and
    the ``SOLARIS_*`` variables (read on every request, so the page follows them)."""
    from solaris.config import SolarisConfig

    return SolarisConfig.load()


def artifacts_dir() -> StatePath:
    """The state root the page reads: ``cycle.state_uri``, else ``artifacts_dir``."""
    cfg = settings()
    return state_path(cfg.cycle.state_uri or str(cfg.artifacts_dir))


def live_namespace() -> str:
    """The namespace of the live cycle: the settings' ``namespace`` (default ``live``)."""
    return settings().namespace


# -- the app ----------------------------------------------------------------------------------

DagFilter = Callable[[str], bool]


def dag_run_reader(user: GetUserDep) -> DagFilter:
    """Airflow's auth manager on this app: who may see which runs.

    ``GetUserDep`` is the dependency that guards Airflow's own ``/api/v2`` routes: the JWT
    from the ``Authorization: Bearer`` header or the UI's ``_token`` cookie, else 401 (403
    for a token that does not verify). The returned filter keeps the DAGs whose runs the
    user may read (``GET`` on ``DagAccessEntity.RUN`` of that DAG), as the UI's DAG list
    does.
    """
    manager = get_auth_manager()

    def may_read(dag_id: str) -> bool:
        return manager.is_authorized_dag(
            method="GET",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=dag_id),
            user=user,
        )

    return may_read


def _login_url(request: Request) -> str | None:
    """The auth manager's login page, coming back to this request; None when there is no
    auth manager (the app outside an api-server)."""
    try:
        return get_auth_manager().get_url_login(next_url=str(request.url))
    except RuntimeError:
        return None


# The routes' parameters (module level: FastAPI resolves the annotations in this module).
Reader = Annotated[DagFilter, Depends(dag_run_reader)]
NamespaceParam = Annotated[str | None, Query(description="the namespace shown")]
DagIdParam = Annotated[str | None, Query(description="only this DAG's runs")]
FromParam = Annotated[str | None, Query(alias="from", description="interval end at or after")]
ToParam = Annotated[str | None, Query(alias="to", description="interval end at or before")]


def create_app(root: StatePath | str | None = None) -> FastAPI:
    """The SOLARIS FastAPI app; ``root`` is the state root (default: :func:`artifacts_dir`,
    read on every request)."""
    api = FastAPI(title="SOLARIS", description="Run records of the SOLARIS Airflow DAGs.")

    def current_root() -> StatePath:
        return state_path(root) if root is not None else artifacts_dir()

    @api.get("/", response_class=HTMLResponse)
    def page(
        may_read: Reader,
        namespace: NamespaceParam = None,
        dag_id: DagIdParam = None,
        start: FromParam = None,
        end: ToParam = None,
    ) -> HTMLResponse:
        where = current_root()
        raw = {"from": start, "to": end}
        live = live_namespace()
        try:
            filters = parse_filters(namespace, dag_id, start, end)
        except FilterError as exc:
            lenient = Filters(namespace=namespace or None, dag_id=dag_id or None)
            page_html = render_page(
                load_runs(where),
                where,
                lenient,
                live=live,
                may_read=may_read,
                problem=str(exc),
                raw=raw,
            )
            return HTMLResponse(page_html, status_code=status.HTTP_400_BAD_REQUEST)
        page_html = render_page(load_runs(where), where, filters, live=live, may_read=may_read)
        return HTMLResponse(page_html)

    @api.get("/api/runs")
    def runs(
        may_read: Reader,
        namespace: NamespaceParam = None,
        dag_id: DagIdParam = None,
        start: FromParam = None,
        end: ToParam = None,
    ) -> dict[str, Any]:
        where = current_root()
        try:
            filters = parse_filters(namespace, dag_id, start, end)
        except FilterError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc
        selection = select_runs(load_runs(where), filters, may_read, live=live_namespace())
        info = selection.namespace
        return {
            "artifacts_dir": str(where),
            "namespace": info.name if info else None,
            "replay": info.replay if info else None,
            "namespaces": [
                {"name": i.name, "replay": i.replay, "runs": i.runs, "latest": i.latest}
                for i in selection.namespaces
            ],
            "filters": filters.as_query(),
            "hidden_dags": selection.hidden_dags,
            "dags": selection.runs,
        }

    @api.exception_handler(HTTPException)
    async def login_first(request: Request, exc: HTTPException) -> Response:
        """A browser that opens the page without a session goes to Airflow's login page
        and comes back; the JSON route answers 401 like ``/api/v2``."""
        if (
            exc.status_code == status.HTTP_401_UNAUTHORIZED
            and request.scope.get("endpoint") is page
        ):
            url = _login_url(request)
            if url is not None:
                return RedirectResponse(url, status_code=status.HTTP_303_SEE_OTHER)
        return await http_exception_handler(request, exc)

    return api


app = create_app()


class SolarisPlugin(AirflowPlugin):
    """Mounts :data:`app` at ``/solaris`` and links it from the UI's navigation bar."""

    name = "solaris"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": app, "url_prefix": "/solaris", "name": "SOLARIS"}
    ]
    external_views: ClassVar[list[dict[str, Any]]] = [
        {"name": "SOLARIS", "href": "/solaris/", "destination": "nav", "url_route": "solaris"}
    ]
