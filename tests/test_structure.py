"""The package's shape: no import cycle between its packages (imports inside functions count:
they are ties too), no function over 80 lines, no class over 25 attributes."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "advisor"
MAX_FUNCTION_LINES = 80
MAX_ATTRIBUTES = 25


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = (path, ast.parse(path.read_text(encoding="utf-8")))
    return out


def _imported(name: str, path: Path, node: ast.AST) -> list[str]:
    """The advisor modules an import statement names (a from-import's names may be modules)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    return [module] + [f"{module}.{a.name}" for a in node.names]


def _package(module: str) -> str:
    """advisor.runner.parent → advisor.runner; a top-level module is a package of its own."""
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, dict[str, list[str]]]:
    """{package: {package it imports: ["path:line", ...]}} over every import in advisor/."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name, (path, tree) in _modules().items():
        for node in ast.walk(tree):
            for target in _imported(name, path, node):
                a, b = _package(name), _package(target)
                if target.startswith("advisor.") and a != b:
                    graph[a][b].append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_packages():
    graph = package_graph()
    found = cycles(graph)
    ties = [f"{a} -> {b} ({', '.join(graph[a][b][:3])})" for comp in found for a in comp for b in graph[a] if b in comp]
    assert not found, "import cycles between packages:\n" + "\n".join(ties)


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b": ["x:1"]}, "b": {"c": ["x:2"]}, "c": {"a": ["x:3"]}, "d": {"a": ["x:4"]}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b": []}, "b": {}}) == []


def test_every_package_ships():
    """A package missing from pyproject's list works in an editable install and is absent from a wheel."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT.parent).parts) for p in ROOT.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


def test_no_long_function_and_no_large_class():
    long, large = [], []
    for _, (path, tree) in _modules().items():
        where = path.relative_to(ROOT.parent)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
            elif isinstance(node, ast.ClassDef) and not any(getattr(b, "id", None) == "TypedDict" for b in node.bases):
                # a TypedDict's annotations are the keys of a dict crossing a boundary, not state
                attrs = {t.attr for t in ast.walk(node) if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)
                         and isinstance(t.value, ast.Name) and t.value.id == "self"}
                attrs |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
                if len(attrs) > MAX_ATTRIBUTES:
                    large.append(f"{where}:{node.lineno} {node.name} ({len(attrs)} attributes)")
    assert not long and not large, "\n".join(long + large)
