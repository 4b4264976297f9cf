"""Imports point one way: no module, and no package, reaches back up to one that imports it.

A cycle means a module cannot be read, tested or loaded without the ones above it. Two
views are checked. Between modules: every module of `webapp/` (the migrations aside),
with every import it makes, those only a type checker reads (`if TYPE_CHECKING:`) and
those inside functions included. Between packages: each package (`webapp.chat`,
`webapp.llm`, ...) is one node and each top-level module (`webapp.settings`,
`webapp.db`, ...) another, so a package that imports a module that imports the package
back is found even when no two single modules close the loop. Each failure names the
lines that make the cycle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import webapp

ROOT = Path(webapp.__file__).resolve().parent
SKIPPED = ("migrations",)
"""Alembic's scripts: loaded by alembic, by path, never imported by the app."""

Graph = dict[str, dict[str, list[str]]]
"""For each node, the nodes it imports, each with where (file:line)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, Path]:
    """Every module of the app, by name (a package by its own name, for its __init__)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        if path.relative_to(ROOT).parts[0] not in SKIPPED:
            found[module_name(path)] = path
    return found


def imported(module: str, source: str, known: set[str], *, package: bool) -> list[tuple[str, int]]:
    """The modules of `known` that `source` (the text of `module`) imports, with the line.

    `import a.b` imports `a.b`; `from a import b` imports `a.b` where that is a module,
    else `a` (b is a name in it). A relative import is read from `module`'s package
    (`package`: the module is a package's __init__, so its package is itself)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if package else module.split(".")[:-1]
                parent = here[: len(here) - (node.level - 1)]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:
                inner = f"{base}.{alias.name}"
                found.append((inner if inner in known else base, node.lineno))
    return [(name, line) for name, line in found if name in known and name != module]


def module_imports() -> Graph:
    modules = sources()
    known = set(modules)
    graph: Graph = {name: defaultdict(list) for name in modules}
    for name, path in modules.items():
        where = path.relative_to(ROOT.parent)
        package = path.name == "__init__.py"
        for target, line in imported(name, path.read_text(), known, package=package):
            if f"{where}:{line}" not in graph[name][target]:
                graph[name][target].append(f"{where}:{line}")
    return graph


def node_of(module: str) -> str:
    """A module's node in the package graph: its package, or itself if top-level
    (`webapp.chat.web.pages` -> `chat`, `webapp.settings` -> `settings`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_imports() -> Graph:
    graph: Graph = defaultdict(lambda: defaultdict(list))
    for source, targets in module_imports().items():
        for target, where in targets.items():
            if node_of(source) != node_of(target):
                graph[node_of(source)][node_of(target)] += where
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The groups of nodes that reach each other (strongly connected, more than one)."""
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


def described(graph: Graph, found: list[list[str]]) -> dict[str, list[str]]:
    """Each import inside a cycle, with where it is made (the first three places)."""
    return {
        f"{a} -> {b}": graph[a][b][:3]
        for group in found
        for a in group
        for b in group
        if b in graph[a]
    }


def test_no_package_imports_one_that_imports_it() -> None:
    graph = package_imports()
    found = cycles(graph)
    assert not found, f"package cycles {found}: {described(graph, found)}"


def test_no_module_imports_one_that_imports_it() -> None:
    graph = module_imports()
    found = cycles(graph)
    assert not found, f"module cycles {found}: {described(graph, found)}"


def test_the_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b": ["x"]}, "b": {"c": ["y"]}, "c": {"a": ["z"]}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b": ["x"]}, "b": {}}) == []


def test_the_check_reads_every_kind_of_import() -> None:
    known = {"webapp.llm", "webapp.llm.catalog", "webapp.llm.manager", "webapp.settings"}
    known |= {"webapp.db", "webapp.chat", "webapp.chat.jobs", "webapp.web.deps"}
    source = """
from typing import TYPE_CHECKING
import webapp.db
from webapp.llm import catalog
from webapp.chat import ChatJobs
from . import manager
if TYPE_CHECKING:
    from webapp.settings import Settings
def later():
    from webapp.web.deps import Owner
"""
    found = {name for name, _ in imported("webapp.llm.routing", source, known, package=False)}
    assert found == {
        "webapp.db",
        "webapp.llm.catalog",
        "webapp.chat",
        "webapp.llm.manager",
        "webapp.settings",
        "webapp.web.deps",
    }
    relative = imported("webapp.llm", "from .catalog import Catalog", known, package=True)
    assert relative == [("webapp.llm.catalog", 1)]


def test_a_top_level_module_is_a_node_of_its_own() -> None:
    assert node_of("webapp.settings") == "settings"
    assert node_of("webapp.llm.providers.http") == "llm"
    assert node_of("webapp.llm") == "llm"


CHAT_LAYERS = ("web", "", "sending", "answering", "files", "stored")
"""`webapp.chat`'s folders, top down: the routes and pages, the jobs beside them (its
top-level modules: the send's orchestrator, reading, editing, naming), the send's
stages, an answer's life, the files a message carries (their own API with them), and
what is stored. Each may import only those below it."""


def chat_layer(module: str) -> int | None:
    """Where a module of `webapp.chat` sits in CHAT_LAYERS (None: outside chat)."""
    parts = module.split(".")
    if parts[:2] != ["webapp", "chat"] or len(parts) < 3:
        return None
    folder = parts[2] if len(parts) > 3 or parts[2] in CHAT_LAYERS else ""
    return CHAT_LAYERS.index(folder)


def test_the_chat_folders_import_downwards_only() -> None:
    """A newcomer reads chat/ from the tree: the pages call the send, the send calls its
    stages, the stages start the answer, and all of them read and write what is stored;
    nothing below reaches back up."""
    upward = [
        f"{source} -> {target} ({', '.join(where)})"
        for source, targets in module_imports().items()
        for target, where in targets.items()
        if (low := chat_layer(source)) is not None
        and (high := chat_layer(target)) is not None
        and high < low
    ]
    assert not upward, "imports up chat's folders:\n" + "\n".join(upward)


def test_the_chat_layers_are_read_from_the_path() -> None:
    assert chat_layer("webapp.chat.web.pages") == 0
    assert chat_layer("webapp.chat.send") == chat_layer("webapp.chat.jobs") == 1
    assert chat_layer("webapp.chat.sending.store") == 2
    assert chat_layer("webapp.chat.files.store") == 4
    assert chat_layer("webapp.chat.stored") == 5
    assert chat_layer("webapp.llm.manager") is None
