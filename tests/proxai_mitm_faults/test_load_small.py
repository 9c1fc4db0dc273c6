"""Load, reduced (benchmarks/load.py runs 200): 20 concurrent translated streams, mixed directions,
through one mitmdump against the loopback echo upstream — zero errors, zero cross-talk (each client
gets exactly its own text, checked with the SDK accumulators), peak RSS reported."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def _load():
    spec = importlib.util.spec_from_file_location("proxai_load_bench", ROOT / "benchmarks" / "load.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_20_concurrent_translated_streams():
    load = _load()
    out = load.load_run(20, n_deltas=10, delay=0.05, timeout=60)
    print("\n" + out["text"])
    assert not out["bad"], "\n".join(out["bad"])
    assert out["cross"] == 0
    assert out["in_flight"] >= 15, "the streams did not run concurrently"
    assert out["alive"] and not out["traceback"]
    assert out["peak_mb"] < 1024
