"""End to end through a real mitmdump: two sessions interleaved — an agent that sends its session id
in a header (Anthropic, passed through) and a Chat client that sends none (translated to Anthropic) —
recorded with the addon; the records, the report and the OpenTelemetry spans (a loopback collector)
agree on the two sessions, and the report marks the turn where the agent's cache reads dropped."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is part of the dev environment")

from proxai_mitm.flow.session import group_sessions  # noqa: E402
from proxai_mitm.reporting.report import rows  # noqa: E402
from tests.fake_upstream import FakeUpstream  # noqa: E402
from tests.mitm_harness import Mitmdump, read_flows  # noqa: E402

from .reporting.test_otel import Receiver, _attrs  # noqa: E402

pytestmark = pytest.mark.e2e

FLOWS = Path(__file__).resolve().parents[2] / "flows"


def _make_flows() -> Any:
    if "make_flows" in sys.modules:
        return sys.modules["make_flows"]
    spec = importlib.util.spec_from_file_location("make_flows", FLOWS / "make_flows.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_flows"] = mod
    spec.loader.exec_module(mod)
    return mod


mf = _make_flows()
SCENARIO = next(sc for sc in mf.SCENARIOS if sc.name == "sessions")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The scenario recorded through mitmdump with spans to a loopback collector: (flows, spans)."""
    tmp = tmp_path_factory.mktemp("sessions")
    up = FakeUpstream(use_defaults=False).start()
    receiver = Receiver()
    routes = tmp / "routes.toml"
    routes.write_text(mf.ROUTES_TOML)
    proxy = Mitmdump(mode=f"reverse:{up.url}",
                     options={"proxai_config": str(routes), "proxai_otel_endpoint": receiver.url})
    try:
        proxy.start()
        mf.record(proxy, up, [SCENARIO])
        end = time.monotonic() + 15
        while len(receiver.spans()) < len(SCENARIO.reasons) and time.monotonic() < end:
            time.sleep(0.1)
        proxy.stop()
        assert proxy.flows_path is not None
        yield read_flows(proxy.flows_path), receiver.spans()
    finally:
        proxy.cleanup()
        receiver.close()
        up.stop()


def test_the_records_hold_both_sessions(recorded):
    flows, _ = recorded
    assert [f.metadata["proxai"]["stop"]["reason"] for f in flows] == SCENARIO.reasons
    sessions = [f.metadata["proxai"]["session"] for f in flows]
    agent, tutor = sessions[0], sessions[1]  # interleaved: agent, tutor, agent, tutor, ...
    assert agent["source"] == "header:x-claude-code-session-id" and tutor["source"] == "prefix"
    assert [s["id"] for s in sessions] == [agent["id"], tutor["id"]] * 3 + [agent["id"]]
    assert mf.SESSION_ID not in str([f.metadata for f in flows])  # a digest, never the header's value
    # each turn's prefix grows by the previous turn's answer and the next question
    counts = [s["prefix"]["message_count"] for s in sessions]
    assert counts[0::2] == [1, 3, 5, 7] and counts[1::2] == [1, 3, 5]  # a system message is the system prompt
    assert all(f.comment.endswith(f" · session {s['id']}") for f, s in zip(flows, sessions, strict=True))


def test_the_report_groups_them_and_marks_the_drop(recorded):
    flows, _ = recorded
    agent, tutor = group_sessions(rows(flows))
    assert (agent["turns"], tutor["turns"]) == (4, 3)
    assert agent["source"] == "header:x-claude-code-session-id" and tutor["source"] == "prefix"
    assert agent["cache_read_share"] == round(4230 / 8638, 4)  # the cache reads of turns 2 and 3
    (d,) = agent["drops"]
    assert d["turn"] == 4 and d["changed"] == ["system prompt changed"]
    assert tutor["drops"] == [] and tutor["cache_read_share"] > 0.6


def test_every_span_carries_its_session(recorded):
    flows, spans = recorded
    assert len(spans) == len(flows)
    by_id: dict[str, int] = {}
    for s in spans:
        cid = _attrs(s.attributes)["gen_ai.conversation.id"]
        by_id[cid] = by_id.get(cid, 0) + 1
    ids = {f.metadata["proxai"]["session"]["id"] for f in flows}
    assert set(by_id) == ids and sorted(by_id.values()) == [3, 4]
