"""Shared test setup: strict mode, the fixture root, SSE helpers, the protocols from the registry.

Import the helpers as ``from tests.conftest import FIXTURES, PROTOCOLS, sse_events, ...``.
A missing ``../shared/fixtures`` skips the tests that read it (``needs_fixtures``); a codec that
fails to import fails the run (the protocol list is read from the registry when this loads).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from proxai_core import Protocol
from proxai_core.codecs import all_codecs
from proxai_core.sse import SSEReader

#: the repository root
ROOT = Path(__file__).resolve().parents[1]
#: real provider recordings, next to the repository (absent in a user's fresh clone)
FIXTURES = ROOT.parent / "shared" / "fixtures"
HAVE_FIXTURES = FIXTURES.is_dir()
needs_fixtures = pytest.mark.skipif(not HAVE_FIXTURES, reason="../shared/fixtures absent")

#: every protocol, from the registry (an import failure of any codec raises here)
PROTOCOLS: tuple[Protocol, ...] = tuple(c.protocol for c in all_codecs())
#: every (source, target) pair of different protocols
DIRECTIONS: tuple[tuple[Protocol, Protocol], ...] = tuple(
    (s, t) for s in PROTOCOLS for t in PROTOCOLS if s is not t)


#: the recordings' folder of a protocol whose folder is not its short name
_FOLDERS = {"vertex_anthropic": "vertex-anthropic", "bedrock_invoke": "bedrock-invoke", "converse": "bedrock-converse"}
#: the suffix of a protocol's stream recordings where they are not SSE
STREAM_SUFFIXES = {Protocol.BEDROCK_CONVERSE: ".eventstream", Protocol.BEDROCK_INVOKE: ".eventstream"}
#: cases no recording shows, written from the providers' documentation (``tests/documented/<folder>``)
DOCUMENTED = ROOT / "tests" / "documented"


def fixture_folder(protocol: Protocol | str) -> str:
    """The folder name of a protocol's recordings (its short name unless :data:`_FOLDERS` says)."""
    from proxai_core.codecs import get

    name = get(protocol).name
    return _FOLDERS.get(name, name)


def fixture_dir(protocol: Protocol | str) -> Path:
    """The recordings of one protocol (``../shared/fixtures/<folder>``; may not exist)."""
    return FIXTURES / fixture_folder(protocol)


def sse_events(raw: bytes) -> list[tuple[str | None, str]]:
    """An SSE body -> its (event name or None, data) pairs, as the core reads them."""
    r = SSEReader()
    return r.feed(raw) + r.close()


def sse_data(raw: bytes) -> list[str]:
    """The data of every event of an SSE body."""
    return [d for _, d in sse_events(raw)]


def sse(events: Iterable[tuple[str | None, Any]]) -> bytes:
    """(event name or None, object or raw data text) pairs -> an SSE body."""
    out = []
    for name, obj in events:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        if name:
            out.append(f"event: {name}\n")
        out.append(f"data: {data}\n\n")
    return "".join(out).encode()


@pytest.fixture(scope="session")
def fixtures_root() -> Path:
    """The fixture root; the test skips when it is absent."""
    if not HAVE_FIXTURES:
        pytest.skip("../shared/fixtures absent")
    return FIXTURES


def pytest_configure(config):
    # strict mode: an exception inside the core (a ProxAI bug) raises instead of becoming a warning
    from proxai_core.strict import set_strict

    set_strict(True)
