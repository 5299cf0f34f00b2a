"""The product's import graph: no circle, and every import points down.

Every ``import`` in ``solaris/`` counts, at module level or inside a function (a lazy import
that closes a circle only hides it), except those under ``if TYPE_CHECKING:``. Importing
``a.b.c`` also runs ``a`` and ``a.b``, so a package's ``__init__`` is an edge too (but not of
the package's own modules, which run after it).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "solaris"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """The ``solaris`` modules ``path`` imports, at any depth, outside TYPE_CHECKING."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.update(
                    f"{child.module}.{a.name}"
                    if f"{child.module}.{a.name}" in MODULES
                    else child.module
                    for a in child.names
                )
            elif isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    edges = set()
    for name in found:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        parts = name.split(".")
        edges.update(".".join(parts[:k]) for k in range(2, len(parts) + 1))  # with parents
    return edges


def _ancestors(name: str) -> set[str]:
    """A module's own packages: always initialised before it, so never an edge of it."""
    parts = name.split(".")
    return {".".join(parts[:k]) for k in range(1, len(parts) + 1)}


GRAPH = {name: _imports(path) - _ancestors(name) for name, path in MODULES.items()}


def _circles() -> list[list[str]]:
    """Strongly connected components of more than one module (networkx, in the lock
    through torch)."""
    import networkx as nx

    graph = nx.DiGraph([(m, t) for m, targets in GRAPH.items() for t in targets if t in GRAPH])
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def _layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


# What each layer may never import (a dependency pointing up, or into the example).
FORBIDDEN = {
    "store": {"serving", "pipeline", "orchestration", "evaluation", "models", "local", "cli"},
    "data": {"serving", "pipeline", "orchestration", "evaluation", "local", "cli"},
    "serving": {"pipeline", "orchestration", "evaluation", "local", "dashboard", "cli"},
    "pipeline": {"orchestration", "evaluation", "local", "dashboard", "cli"},
    "models": {"orchestration", "evaluation", "local", "dashboard", "cli", "serving"},
    # The DAGs' task bodies: a deployment runs them without the one-machine runner.
    "orchestration": {"local", "cli"},
    # The SOLARIS page's logic runs in the Airflow api-server: it reads run records (through
    # orchestration.layout) and nothing that computes or serves them.
    "dashboard": {"serving", "pipeline", "evaluation", "models", "local", "cli"},
    # The user's adapters are loaded by every layer that computes: they stand below them.
    "adapters": {"serving", "pipeline", "orchestration", "evaluation", "local", "dashboard", "cli"},
    # The one time rule: below everything but the error tree.
    "times": {"store", "data", "serving", "pipeline", "models", "orchestration", "evaluation"}
    | {"local", "dashboard", "cli", "config", "adapters"},
}
# The product imports no example (the CLI gets the example's commands by an entry point).
EXAMPLE_IMPORTS_ALLOWED: set[str] = set()


def test_the_graph_was_read() -> None:
    assert "solaris.store.contract" in GRAPH["solaris.store.online"]
    assert "solaris.times" in GRAPH["solaris.dashboard.filters"]
    assert len(GRAPH) > 50


def test_no_module_of_solaris_is_on_an_import_circle() -> None:
    assert _circles() == []


def test_every_import_points_down_and_the_product_leaves_the_example_alone() -> None:
    wrong = []
    for module, imported in sorted(GRAPH.items()):
        if _layer(module) == "examples":
            continue
        for target in sorted(imported):
            if _layer(target) in FORBIDDEN.get(_layer(module), set()):
                wrong.append(f"{module} -> {target}")
            if _layer(target) == "examples" and module not in EXAMPLE_IMPORTS_ALLOWED:
                wrong.append(f"{module} -> {target} (the product imports the example)")
    assert wrong == []


def test_every_product_module_imports_with_the_examples_blocked() -> None:
    """In a fresh interpreter where importing ``solaris.examples`` fails, every module of
    the product still imports (the CLI loses only the example's commands)."""
    import subprocess
    import sys

    product = sorted(m for m in MODULES if _layer(m) != "examples" and m != "solaris.__main__")
    script = (
        "import importlib, importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'solaris.examples' or name.startswith('solaris.examples.'):\n"
        "            raise ImportError(f'blocked: {name}')\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for name in {product!r}:\n"
        "    importlib.import_module(name)\n"
        "print('imported', len(sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_no_orchestration_module_imports_airflow_when_imported_but_the_executors() -> None:
    """The task bodies run without a scheduler; only ``warm`` (executors Airflow loads,
    subclassing its own) imports Airflow at module level."""
    offenders = []
    for name, path in MODULES.items():
        if not name.startswith("solaris.orchestration") or name.endswith(".warm"):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                module = node.module if isinstance(node, ast.ImportFrom) else None
                if any(n.split(".")[0] == "airflow" for n in [*names, module or ""]):
                    offenders.append(f"{name}: {ast.unparse(node)}")
    assert not offenders, offenders
