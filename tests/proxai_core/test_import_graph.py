"""proxai_core's modules import each other in one direction only: the import graph, read statically
from the source, has no cycle, and no function imports a proxai_core module (an import inside a
function is how a cycle hides)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import proxai_core
from proxai_core.protocol import Protocol

ROOT = Path(proxai_core.__file__).parent
PACKAGE = "proxai_core"


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The proxai_core modules an import statement of ``module`` imports."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    if node.level:
        base = module.split(".")
        if not _is_package(module):
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source not in MODULES:
        return []
    # "from package import name": the submodule when ``name`` is one, else the package itself
    subs = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in MODULES]
    return subs if len(subs) == len(node.names) else [source, *subs]


def _imports(module: str) -> tuple[set[str], list[str]]:
    """(modules imported at module level, "line: statement" of every import inside a function)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    top: set[str] = set()
    local: list[str] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                targets = _targets(module, child)
                if targets and in_function:
                    local.append(f"{child.lineno}: {ast.unparse(child)}")
                top.update(targets)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, False)
    return top, local


def _graph() -> dict[str, set[str]]:
    graph = {m: _imports(m)[0] for m in MODULES}
    # the registry loads each protocol's codec module by name (the Protocol member's, lower case)
    graph[f"{PACKAGE}.codecs"] |= {f"{PACKAGE}.codecs.{p.name.lower()}" for p in Protocol}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(m: str) -> list[str] | None:
        path.append(m)
        on_path.add(m)
        for t in sorted(graph[m]):
            if t in on_path:
                return path[path.index(t):] + [t]
            if t not in done:
                found = visit(t)
                if found:
                    return found
        path.pop()
        on_path.discard(m)
        done.add(m)
        return None

    for m in sorted(graph):
        if m not in done:
            found = visit(m)
            if found:
                return found
    return None


def test_the_graph_is_read_from_the_source():
    graph = _graph()
    assert len(MODULES) > 20
    assert f"{PACKAGE}.codecs.base" in graph[f"{PACKAGE}.codecs.chat"]
    assert f"{PACKAGE}.codecs._openai_common" in graph[f"{PACKAGE}.codecs.chat"]  # "from . import x as y"
    assert f"{PACKAGE}.codecs.gemini" in graph[f"{PACKAGE}.codecs"]
    assert f"{PACKAGE}.neutral" in graph[f"{PACKAGE}.errors"]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_proxai_core_has_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, " -> ".join(cycle or [])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_function_imports_a_proxai_core_module(module: str):
    assert _imports(module)[1] == []
