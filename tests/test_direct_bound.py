"""The hand-written direct translators of benchmarks/direct_bound.py produce exactly ProxAI's output
on their inputs: the bound they give is the cost of that same output, not of less work."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import ROOT, needs_fixtures


@needs_fixtures
def test_direct_translators_match_proxai_output() -> None:
    spec = importlib.util.spec_from_file_location("proxai_direct_bound", ROOT / "benchmarks" / "direct_bound.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(mod)
        rows = mod.checked_rows()  # SystemExit names a row whose output differs
    finally:
        sys.path[:] = saved
    assert len(rows) == 8
    for label, _target, _units, cases in rows:
        assert set(cases) == {"bare", "direct", "ProxAI"}, label
        assert cases["direct"]() and cases["ProxAI"](), label
