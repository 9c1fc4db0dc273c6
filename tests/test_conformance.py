"""The conformance classification of benchmarks/conformance.py (every real recording through every
direction, judged by the SDKs and the semantic comparison) has no unexplained fail.

One pass over all cases (about 20–40 s on a 2-core machine), shared by the tests below. Known fails
(bugs reported, listed in ``KNOWN_FAILS`` with the reason; none today) must still fail until they are
removed from the list; any other fail fails the suite. Skips when ../shared/fixtures is absent.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("proxai_conformance", ROOT / "benchmarks" / "conformance.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


cf = _load()

pytestmark = pytest.mark.skipif(not cf.FIXTURES.is_dir(), reason="../shared/fixtures absent")


@pytest.fixture(scope="module")
def cases():
    return cf.run_all()


def test_every_kind_and_direction_ran(cases):
    kinds = {(c.kind, c.source, c.target) for c in cases}
    for s in cf.PROTOCOLS:
        for t in cf.PROTOCOLS:
            for k in ("json", "json→sse", "sse", "sse→json", "error"):
                assert (k, s, t) in kinds, (k, s, t)
            if s is not t:
                assert ("request", s, t) in kinds, ("request", s, t)
    assert sum(c.status == "pass" for c in cases) > len(cases) // 2


def test_no_unexplained_fail(cases):
    bad = [c for c in cases if c.status == "fail" and not c.known]
    assert not bad, "unexplained conformance fails:\n" + "\n".join(
        f"  {c.kind} {c.source.value} -> {c.target.value} {c.path.name}: {c.reason}" for c in bad[:40])


def test_rejections_name_a_feature(cases):
    """Rejected by design means: a TranslationError naming an unrepresentable feature, or a warning
    naming what was dropped; never a bare rejection."""
    for c in cases:
        if c.status == "rejected":
            assert c.reason.startswith(("lossy", "TranslationError")), (c.name, c.reason)
            assert len(c.reason) > 20, (c.name, c.reason)


def test_known_fails_still_fail(cases):
    """Every entry of KNOWN_FAILS (bugs reported, not fixed yet) still matches a failing case; a fixed
    one must be removed from the list. The list is empty today: every case passes or is rejected by
    design."""
    stale = [why for why in cf.KNOWN_FAILS.values()
             if not any(c.status == "fail" and c.known == why for c in cases)]
    assert not stale, f"known fails that no longer fail (remove them from KNOWN_FAILS): {stale}"
    assert sum(c.status == "fail" for c in cases) == sum(c.status == "fail" and bool(c.known) for c in cases)
