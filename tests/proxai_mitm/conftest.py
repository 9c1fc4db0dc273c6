from __future__ import annotations

from pathlib import Path

import pytest

from .chain import chain

FIXTURES = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures"


def codecs_available() -> bool:
    try:
        import proxai_core.codecs.anthropic
        import proxai_core.codecs.chat
        import proxai_core.codecs.responses  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


needs_codecs = pytest.mark.skipif(not codecs_available(), reason="proxai_core codecs not importable yet")


@pytest.fixture
def addon():
    """The ProxAI addon list under taddons (``addon.request(flow)`` runs every addon's hook)."""
    with chain() as c:
        yield c
        c.replayer.done()
