"""RedactAhead under taddons: a big flow's redacted copy is prepared off the event loop before
Save writes it; small flows and runs without -w cost no coroutine."""

from __future__ import annotations

import asyncio
import threading

from mitmproxy.addons.save import Save
from mitmproxy.test import taddons, tflow

from proxai_mitm.addons.redact_ahead import THRESHOLD, RedactAhead
from proxai_mitm.redaction import redact

SECRET = "ahead-secret-value-0123456789"


def _flow(size: int):
    f = tflow.tflow(resp=True)
    f.request.headers["x-api-key"] = SECRET
    f.response.content = b"x" * size + SECRET.encode()
    return f


def test_big_flow_prepared_off_the_loop(tmp_path, monkeypatch):
    threads = []
    orig = redact._redact_state

    def spy(*a):
        threads.append(threading.current_thread() is threading.main_thread())
        return orig(*a)

    monkeypatch.setattr(redact, "_redact_state", spy)
    ra = RedactAhead()
    with taddons.context(Save(), ra) as tctx:
        tctx.options.update(save_stream_file=str(tmp_path / "f.mitm"))
        f = _flow(THRESHOLD)
        coro = ra.response(f)
        assert coro is not None
        asyncio.run(coro)
        assert threads == [False]  # scanned on the worker thread
        state = redact.redacted_state(f)
        assert threads == [False]  # Save's get_state got the prepared copy: no second scan
        assert SECRET.encode() not in state["response"]["content"]
        assert ra.response(_flow(10)) is None and ra.error(_flow(10)) is None  # small: inline later


def test_nothing_without_a_recording():
    ra = RedactAhead()
    with taddons.context(Save(), ra):
        assert ra.response(_flow(THRESHOLD * 2)) is None
