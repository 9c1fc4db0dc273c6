"""The rooms of src/proxai_mitm: sub-packages by concern, each importing only rooms below it, no
import cycle between modules (imports inside functions count too), and the flow record written and
read in one place."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "src" / "proxai_mitm"

#: the rooms, lowest first: a module may import its own room and the rooms listed before it
ROOMS = ["config", "limits", "wire", "redaction", "flow", "replay", "failover", "reporting", "addons"]
#: the package's top level (the loader, the CLI) may import every room
TOP = "."


def room_of(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else TOP


def modules() -> dict[str, ast.Module]:
    """Every module by dotted name inside the package (``flow.state``, ``addon``)."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts) or "__init__"
        out[name] = ast.parse(p.read_text(encoding="utf-8"), str(p))
    return out


def _resolve(name: str, node: ast.ImportFrom) -> list[str]:
    """The package modules a ``from … import …`` in module ``name`` names (dotted, package-relative)."""
    if node.level == 0:
        mod = node.module or ""
        if not mod.startswith("proxai_mitm"):
            return []
        base = mod.removeprefix("proxai_mitm").lstrip(".")
    else:
        here = name.split(".")[:-1] if name != "__init__" else []
        if node.level > 1:
            here = here[: len(here) - (node.level - 1)]
        base = ".".join(here + ([node.module] if node.module else []))
    if node.module is None or (node.level == 0 and not base):
        return [f"{base}.{a.name}".lstrip(".") for a in node.names]
    return [base] + [f"{base}.{a.name}" for a in node.names]


def imports_of(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in the module."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.update(_resolve(name, node))
        elif isinstance(node, ast.Import):
            out.update(a.name.removeprefix("proxai_mitm.") for a in node.names if a.name.startswith("proxai_mitm."))
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


def _room(module: str) -> str:
    head = module.split(".")[0]
    return head if head in ROOMS else TOP


def test_every_module_lives_in_a_room():
    loose = {p.name for p in PKG.glob("*.py")} - {"__init__.py", "__main__.py", "addon.py", "addon_script.py", "cli.py"}
    assert not loose, f"modules outside the rooms: {sorted(loose)}"
    assert sorted(p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(ROOMS)


def test_imports_go_down_the_rooms():
    """A room imports only itself and the rooms below it; the top level imports anything."""
    mods = modules()
    known = set(mods)
    wrong = []
    for name, tree in mods.items():
        here = _room(name)
        if here == TOP:
            continue
        for dep in imports_of(name, tree, known):
            there = _room(dep)
            if there == TOP or ROOMS.index(there) > ROOMS.index(here):
                wrong.append(f"{name} -> {dep}")
    assert not wrong, "imports up the rooms: " + ", ".join(sorted(wrong))


def test_the_rooms_are_read():
    mods = modules()
    graph = {name: imports_of(name, tree, set(mods)) for name, tree in mods.items()}
    assert "flow.state" in graph["addons.translate"] and "wire.bodies" in graph["flow.record"]


def test_the_direction_test_sees_an_import_up():
    tree = ast.parse("from ..addons.translate import plan\n")
    assert imports_of("flow.state", tree, {"addons.translate", "flow.state"}) == {"addons.translate"}


def test_no_import_cycle():
    mods = modules()
    graph = {name: imports_of(name, tree, set(mods)) for name, tree in mods.items()}
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_record_writes_flow_metadata():
    """``flow.metadata`` is written in one place (flow/record.py); every other module reads the record."""
    writers = set()
    for mod, tree in modules().items():
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) \
                        and t.value.attr == "metadata":
                    writers.add(mod)
    assert writers == {"flow.record"}, writers


def test_metadata_is_read_only_through_the_record():
    """No module but flow/record.py looks anything up in ``flow.metadata`` itself (FlowRecord.of does)."""
    def looks_up(node: ast.AST) -> bool:
        if isinstance(node, ast.Subscript):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target = node.func.value
        else:
            return False
        return isinstance(target, ast.Attribute) and target.attr == "metadata"

    readers = {mod for mod, tree in modules().items() if mod != "flow.record" and any(map(looks_up, ast.walk(tree)))}
    assert not readers, readers
