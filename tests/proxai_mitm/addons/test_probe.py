"""probe.py: unreachable upstreams of routed requests get a native 502; steady traffic is not probed."""

from __future__ import annotations

import json
import time

from mitmproxy.test import taddons

from proxai_core import Protocol
from proxai_mitm.addons.probe import Probe, is_connect_error
from proxai_mitm.flow.state import FlowState, flow_state, set_flow_state

from ..helpers import ANTH, CHAT, make_flow


def routed(f, route: str | None = "default") -> None:
    set_flow_state(f, FlowState("generate", Protocol(ANTH), Protocol(CHAT), route))


def test_first_contact_is_probed_and_answering_upstreams_are_not():
    probe = Probe()
    with taddons.context(probe) as tctx:
        async def check() -> None:
            f = make_flow(ANTH, host="127.0.0.1", port=9)
            routed(f)
            res = probe.request(f)
            assert res is not None
            await res
            assert f.response is not None and f.response.status_code == 502
            assert json.loads(f.response.content)["type"] == "error"
            assert flow_state(f).stop.reason.value == "interrupted"
            probe._seen[("192.0.2.1", 443)] = time.monotonic()
            g = make_flow(ANTH, host="192.0.2.1", port=443)
            routed(g)
            assert probe.request(g) is None

        tctx.master.event_loop.run_until_complete(check())


def test_unrouted_replayed_and_offline_flows_are_not_probed():
    replaying = [False]
    probe = Probe(skip=lambda: replaying[0])
    with taddons.context(probe) as tctx:
        async def check() -> None:
            f = make_flow(ANTH, host="127.0.0.1", port=9)
            routed(f, None)
            assert probe.request(f) is None  # pass-through: mitmproxy's own behaviour
            g = make_flow(ANTH, host="127.0.0.1", port=9)
            routed(g)
            replaying[0] = True
            assert probe.request(g) is None
            replaying[0] = False
            g.live = False
            assert probe.request(g) is None

        tctx.master.event_loop.run_until_complete(check())


def test_failed_connect_marks_upstream_dead_and_says_why():
    probe = Probe()
    with taddons.context(probe):
        f = make_flow(ANTH, host="127.0.0.1", port=9)
        routed(f)
        from mitmproxy import flow as mflow

        f.error = mflow.Error("Connection refused ([Errno 111])")
        probe.error(f)
        assert ("127.0.0.1", 9) in probe._dead
        assert "mitmproxy's own 502 page" in flow_state(f).warnings[0]
        assert is_connect_error("getaddrinfo failed") and not is_connect_error("client disconnected")


def test_seen_on_response_headers():
    probe = Probe()
    with taddons.context(probe):
        f = make_flow(ANTH, host="192.0.2.7", port=443)
        routed(f)
        probe.responseheaders(f)
        assert ("192.0.2.7", 443) in probe._seen


def test_hooks_are_off_without_routes_or_while_replaying(addon, tmp_path):
    """mitmproxy skips a hook that is None: pass-through flows pay no dispatch for probing."""
    assert addon.probe.request is None and addon.probe.error is None
    addon.configure(proxai_target="openai_chat_completions")
    assert callable(addon.probe.request) and callable(addon.probe.responseheaders)
