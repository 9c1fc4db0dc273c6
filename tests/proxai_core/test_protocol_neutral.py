"""Only the codecs know protocols: no module outside ``codecs/`` names a Protocol member, imports a
specific codec module, or spells a protocol's wire facts (its name, endpoints, headers, error types
and codes, stop values) - it asks the registry. A new protocol then touches no module outside
``codecs/`` (and the one enum line in protocol.py).
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxai_core import Protocol
from proxai_core.codecs import all_codecs
from proxai_core.stop import StopKey, StopReason

#: packages whose modules must be protocol-neutral outside their ``codecs`` subpackage
SCANNED_PACKAGES: tuple[str, ...] = ("proxai_core", "proxai_mitm")

#: (module path relative to its package, category or value) -> why that module may spell it
ALLOWED: dict[tuple[str, str], str] = {
    ("protocol.py", "protocol name"): "the Protocol enum is the registry's list",
    ("stop.py", "stop value"): "the seed's raw-value table classifies every provider's values, neutrally",
    ("stop.py", "context_length_exceeded"): "a raw value of the seed's table",
    # proxai_mitm: names of its own that happen to equal a wire value
    ("flow/analysis.py", "max_output_tokens"): "the neutral Request field's name in the compact view",
    ("reporting/report.py", "stop"): "the flow record's own field",
    ("flow/state.py", "stop"): "the flow record's own field",
    ("wire/streaming.py", "failed"): "an attribute name of the stream handler",
    ("reporting/reportfmt.py", "stop"): "a report column", ("reporting/reportfmt.py", "tokens"): "a report column",
    ("cli.py", "stop"): "the report's --stop option",
    # SigV4 (signing by botocore) is the credential scheme of a route's ``auth``, not of a protocol: the
    # signer strips and sets its headers whatever protocol the route speaks
    ("wire/credentials.py", "x-amz-date"): "a SigV4 header the signer sets",
    ("wire/credentials.py", "x-amz-security-token"): "a SigV4 header the signer sets",
    ("reporting/htmlreport.py", "stop"): "a report column", ("reporting/htmlreport.py", "tokens"): "a report column",
}

#: neutral vocabulary (error kinds, stop reasons and keys): never a protocol fact
NEUTRAL = frozenset(
    {"invalid_request", "authentication", "billing", "permission", "not_found", "request_too_large",
     "rate_limit", "api_error", "timeout", "overloaded", "interrupted"}
    | {r.value for r in StopReason} | {k.value for k in StopKey})


def _facts() -> dict[str, str]:
    """Every protocol-specific string -> its category, from the registry."""
    facts: dict[str, str] = {}

    def add(values, category: str) -> None:
        for v in values:
            if isinstance(v, str) and v and v not in NEUTRAL:
                facts.setdefault(v, category)

    for c in all_codecs():
        add([c.protocol.value, c.label], "protocol name")
        add([c.wire.endpoints.generate, c.wire.endpoints.count_tokens], "endpoint")
        cr = c.wire.credentials
        add([*cr.vendor_headers, *cr.protocol_headers, *cr.client_markers, *cr.account_headers,
             *cr.default_headers], "header")
        add([*c.errors.types, *c.errors.codes], "error type or code")
        add([*c.stop_values, *(w.value for w in c.stop_table.values()),
             *(w.detail for w in c.stop_table.values() if w.detail)], "stop value")
    return facts


@dataclass(frozen=True)
class Finding:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def _codec_modules() -> set[str]:
    names = {c.protocol.name.lower() for c in all_codecs()}
    return names | {f"_{n}_common" for n in names} | {f"_{n}_request" for n in names}


def _keys(tree: ast.AST) -> set[int]:
    """ids of string constants used as a key (dict display key, subscript, ``.get``/``.pop``/
    ``.setdefault`` name, ``__slots__`` entry): a stop value there is a field name (``meta["stop"]``),
    not a stop."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                for t in node.targets):
            out.update(id(c) for c in ast.walk(node.value))
        elif isinstance(node, ast.Dict):
            out.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            out.add(id(node.slice))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "setdefault") and node.args):
            out.add(id(node.args[0]))
    return out


def scan_source(source: str, where: str, rel: str, facts: dict[str, str]) -> list[Finding]:
    members = set(Protocol.__members__)
    modules = _codec_modules()
    tree = ast.parse(source)
    keys = _keys(tree)
    found: list[Finding] = []
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr in members and (
                isinstance(node.value, ast.Name) and node.value.id == "Protocol"):
            found.append(Finding(line, f"names Protocol.{node.attr}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in facts:
            category = facts[node.value]
            if category == "stop value" and id(node) in keys:
                continue
            if (rel, category) not in ALLOWED and (rel, node.value) not in ALLOWED:
                found.append(Finding(line, f"spells the {category} {node.value!r}"))
        elif isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            named = {a.name for a in node.names}
            if "codecs" in parts and (set(parts) & modules or (parts[-1] == "codecs" and named & modules)):
                found.append(Finding(line, f"imports a codec module ({node.module}: {', '.join(sorted(named))})"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if "codecs" in a.name.split(".") and set(a.name.split(".")) & modules:
                    found.append(Finding(line, f"imports a codec module ({a.name})"))
    return found


def scan_package(package: str) -> list[Finding]:
    root = Path(importlib.import_module(package).__file__).parent  # type: ignore[arg-type]
    facts = _facts()
    found: list[Finding] = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.split("/", 1)[0] == "codecs":
            continue
        found.extend(scan_source(f.read_text(encoding="utf-8"), f"{package}/{rel}", rel, facts))
    return found


@pytest.mark.parametrize("package", SCANNED_PACKAGES)
def test_no_module_outside_the_codecs_knows_a_protocol(package):
    findings = scan_package(package)
    assert not findings, "protocol knowledge outside codecs/ (ask the registry):\n" + "\n".join(map(str, findings))


@pytest.mark.parametrize("snippet,what", [
    ("x = Protocol.CHAT", "Protocol.CHAT"),
    ("if p is Protocol.ANTHROPIC: pass", "Protocol.ANTHROPIC"),
    ("H = ('anthropic-version', 'x')", "header"),
    ("E = {'overloaded_error': 529}", "error type"),
    ("P = '/chat/completions'", "endpoint"),
    ("ok = reason in ('max_tokens', 'x')", "stop value"),
    ("if finish == 'tool_calls': pass", "stop value"),
    ("from .codecs import chat", "codec module"),
    ("from proxai_core.codecs._anthropic_common import ENDPOINTS", "codec module"),
    ("import proxai_core.codecs.responses", "codec module"),
])
def test_the_scan_finds_protocol_knowledge(snippet, what):
    findings = scan_source(snippet, "snippet", "snippet.py", _facts())
    assert findings and what in str(findings[0])


def test_the_scan_accepts_registry_questions():
    src = ("from .codecs import get, all_codecs\n"
           "def f(p, meta):\n    return get(p).capabilities.custom_tools and 'overloaded' and 'end_turn'"
           " and meta['stop'] and meta.get('stop') and {'stop': 1}\n")
    assert scan_source(src, "snippet", "snippet.py", _facts()) == []


def test_every_scanned_package_exists():
    for package in SCANNED_PACKAGES:
        assert importlib.util.find_spec(package) is not None, package
