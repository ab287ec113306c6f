"""The layout the design names: `diffjev` (the core, the services, the studio) and `storage` side by side
at the top level, the core importable with neither a database layer nor Gradio, and no import cycle
between modules of the two packages."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = [
    "diffjev.schema",
    "diffjev.template",
    "diffjev.canvas",
    "diffjev.decide",
    "diffjev.read",
    "diffjev.active",
    "diffjev.calibration",
    "diffjev.jev",
    "diffjev.models",
    "diffjev.engines",
    "diffjev.engines.auto",
    "diffjev.engines.base",
    "diffjev.engines.vllm",
    "diffjev.engines.jev_api",
    "diffjev.engines.transformers",
    "diffjev.engines.autoregressive",
]


def test_storage_is_a_top_level_package_installed_beside_diffjev():
    import storage
    import storage.db

    assert Path(storage.__file__).resolve().parent == ROOT / "storage"
    assert (Path(storage.db.MIGRATIONS) / "versions").is_dir()
    assert not (ROOT / "diffjev" / "storage").exists()


def test_the_core_imports_neither_storage_nor_gradio_in_a_fresh_interpreter():
    code = (
        "import json, sys\n"
        f"for name in {CORE!r}: __import__(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('storage', 'gradio', 'sqlalchemy')"
        " or m.startswith('diffjev.services') or m.startswith('diffjev.ui'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _imports(path: Path, module: str) -> set[str]:
    """The project modules `path` imports anywhere in it (top level or inside a function)."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in ("diffjev", "storage")}


def _module_graph() -> dict[str, set[str]]:
    modules = {}
    for package in ("diffjev", "storage"):
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    graph = defaultdict(set)
    for name, path in modules.items():
        graph[name] = {target for target in _imports(path, name) if target in modules and target != name}
    return graph


def _reachable(graph: dict[str, set[str]], starts) -> set[str]:
    """Every module reached from `starts` by following imports (the starts included)."""
    seen, todo = set(), list(starts)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return seen


def test_storage_uses_only_the_core_and_nothing_in_the_core_reaches_storage():
    graph = _module_graph()
    for name, targets in graph.items():
        if name.startswith("storage"):
            above = sorted(t for t in targets if t.startswith(("diffjev.services", "diffjev.ui", "diffjev.cli")))
            assert above == [], f"{name} imports {above}: storage sits below the services and the UI"
    # Everything the core reaches, following imports, stays out of storage.
    assert not [m for m in _reachable(graph, [m for m in CORE if m in graph]) if m.startswith("storage")]


@pytest.mark.parametrize("root", ["storage", "diffjev"])
def test_no_import_cycle_crosses_the_two_packages(root):
    graph = _module_graph()
    # A cycle that crosses packages: a storage module reaching a diffjev module that reaches back.
    for start in [m for m in graph if m.startswith(root)]:
        seen = _reachable(graph, graph[start])
        crossed = [m for m in seen if m.split(".")[0] != root]
        if crossed:
            assert start not in seen, f"{start} imports itself back through {sorted(crossed)}"
