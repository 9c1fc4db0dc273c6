"""Size and dependency limits of src/proxai_mitm: no module over 400 lines, no class over 250 lines,
no import cycle between its modules (imports inside functions count too)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "src" / "proxai_mitm"
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250


def modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in sorted(PKG.glob("*.py"))}


def imports_of(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports (``from . import x``, ``from .x import y``,
    ``import proxai_mitm.x``), anywhere in the module."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1 or mod.startswith("proxai_mitm"):
                base = mod.removeprefix("proxai_mitm").lstrip(".") if node.level == 0 else mod
                if base:
                    out.add(base.split(".")[0])
                else:
                    out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("proxai_mitm."):
                    out.add(a.name.split(".")[1])
    return (out & known) - {name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_modules_are_small():
    long = {p.name: n for p in PKG.glob("*.py") if (n := len(p.read_text(encoding="utf-8").splitlines()))
            > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_classes_are_small():
    big = {f"{mod}.{node.name}": node.end_lineno - node.lineno + 1
           for mod, tree in modules().items() for node in ast.walk(tree)
           if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES}
    assert not big, f"classes over {MAX_CLASS_LINES} lines: {big}"


def test_no_import_cycle():
    mods = modules()
    graph = {name: imports_of(name, tree, set(mods)) for name, tree in mods.items()}
    assert graph["report"], "the import graph is read (report imports package modules)"
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_record_writes_flow_metadata():
    """``flow.metadata`` is written in one place (record.py); every other module reads the record."""
    writers = set()
    for mod, tree in modules().items():
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) \
                        and t.value.attr == "metadata":
                    writers.add(mod)
    assert writers == {"record"}, writers


def test_metadata_is_read_only_through_the_record():
    """No module but record.py looks anything up in ``flow.metadata`` itself (FlowRecord.of does)."""
    def looks_up(node: ast.AST) -> bool:
        if isinstance(node, ast.Subscript):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target = node.func.value
        else:
            return False
        return isinstance(target, ast.Attribute) and target.attr == "metadata"

    readers = {mod for mod, tree in modules().items() if mod != "record" and any(map(looks_up, ast.walk(tree)))}
    assert not readers, readers
