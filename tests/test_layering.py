"""The packages' imports point one way: no package reaches back up to one that imports it.

The layers, top down: the app (`webapp.app`, `webapp.cli`), then admin, embed and the
gateway, chat, accounts, web, llm, and the top-level modules (`webapp.db`, `webapp.owners`,
`webapp.limits`, ...). A cycle between packages means a module cannot be read without the
ones above it; this finds any, with the lines that make it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import webapp

ROOT = Path(webapp.__file__).resolve().parent


def package_of(module: str) -> str | None:
    """The package a `webapp.x.y` module is in (None for a top-level module)."""
    parts = module.split(".")
    if parts[0] != "webapp" or len(parts) < 2 or not (ROOT / parts[1]).is_dir():
        return None
    return parts[1]


def package_imports() -> dict[str, dict[str, list[str]]]:
    """For each package, the packages it imports, each with where (file:line)."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        source = package_of(module)
        if source is None or source == "migrations":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                target = package_of(name)
                if target is not None and target != source:
                    graph[source][target].append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The groups of packages that reach each other (strongly connected, more than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_package_imports_one_that_imports_it() -> None:
    graph = package_imports()
    found = cycles(graph)
    where = {
        f"{a} -> {b}": graph[a][b][:3]
        for group in found
        for a in group
        for b in group
        if b in graph[a]
    }
    assert not found, f"package cycles {found}: {where}"


def test_the_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b": ["x"]}, "b": {"c": ["y"]}, "c": {"a": ["z"]}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b": ["x"]}, "b": {}}) == []
