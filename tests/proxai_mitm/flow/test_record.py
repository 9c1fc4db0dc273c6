"""record.py / state.py: the one typed flow record, how it is built, stored and read back."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import io as mio

from proxai_core import Plan, Protocol, StopInfo, StopReason
from proxai_core.neutral import Usage
from proxai_mitm.addons.annotate import annotate
from proxai_mitm.flow.record import METADATA_KEY, SCHEMA_VERSION, FlowRecord
from proxai_mitm.flow.state import FlowState, record_dict

from ..helpers import ANTH, BODIES, CHAT, json_bytes, make_flow, respond

#: example recordings written by the addon through a real mitmdump (flows/make_flows.py)
FLOWS = Path(__file__).resolve().parents[3] / "flows"


def to_record(st: FlowState, f: Any = None) -> FlowRecord:
    """The record as production writes it (the annotation addon) on flow ``f``, read back."""
    f = make_flow(ANTH) if f is None else f
    annotate(f, st)
    rec = FlowRecord.of(f)
    assert rec is not None
    return rec


#: the example recordings as the addon wrote them before the record was typed (schema 1)
SCHEMA1 = Path(__file__).resolve().parents[1] / "data" / "schema1"


def test_schema_1_recordings_are_read():
    """Recordings written before the record was typed (no version key) are still read."""
    files = sorted(SCHEMA1.glob("*.mitm"))
    assert files
    for p in files:
        with open(p, "rb") as fh:
            flows = list(mio.FlowReader(fh).stream())
        for f in flows:
            raw = f.metadata["proxai"]
            assert "version" not in raw
            rec = FlowRecord.of(f)
            assert rec is not None and rec.version == SCHEMA_VERSION and rec.kind == "generate"
            assert rec.client_protocol == Protocol(raw["client_protocol"])
            if raw["stop"] is not None:
                assert rec.stop_info().reason == StopReason(raw["stop"]["reason"])
            assert rec.client_body(f) == raw["client_request"].encode()
            if raw.get("upstream_chunks"):
                assert sum(n for _, n in rec.upstream_chunks) == len(rec.upstream_body(f))


def test_round_trip_through_a_flow_file_and_cache():
    f = make_flow(ANTH)
    st = FlowState("generate", Protocol(ANTH), Protocol(CHAT), "r1", client_text=json.dumps(BODIES[ANTH]),
                   client_model="claude-x", upstream_model="gpt-4o", translation=Plan.JSON,
                   stop=StopInfo(StopReason.REFUSAL, raw="content_filter", message="no"),
                   usage=Usage(input=3, output=4), upstream_text='{"choices": []}', upstream_status=200,
                   upstream_headers=[("x-id", "1")], replay={"result": "hit", "flow": "abc"},
                   truncated=[("response", 10, 20)])
    to_record(st, f)
    assert FlowRecord.of(f) is FlowRecord.of(f)  # validated once, cached on the flow
    buf = io.BytesIO()
    mio.FlowWriter(buf).add(f)  # plain JSON values only: mitmproxy can serialize them
    g = next(iter(mio.FlowReader(io.BytesIO(buf.getvalue())).stream()))
    rec = FlowRecord.of(g)
    assert rec == FlowRecord.of(f)
    assert rec.model == "claude-x → gpt-4o" and rec.stop_info().reason is StopReason.REFUSAL
    assert rec.usage.usage().input_total == 3 and rec.replay.result == "hit"
    assert rec.truncated[0].kept == 10 and rec.upstream_headers == [("x-id", "1")]
    g.metadata["proxai"] = dict(g.metadata["proxai"], route="other")  # a new value is read anew
    assert FlowRecord.of(g).route == "other"


def test_pass_through_record_keeps_no_body_copies():
    f = make_flow(ANTH)
    respond(f, 200, json_bytes(ANTH), "application/json")
    st = FlowState("generate", Protocol(ANTH), Protocol(ANTH), None, client_text="{}", translation=Plan.OBSERVE,
                   upstream_text=json_bytes(ANTH).decode())
    rec = to_record(st, f)
    assert rec.client_request is None and rec.upstream_response is None
    assert json.loads(rec.client_body(f)) == BODIES[ANTH]
    assert rec.upstream_body(f) == json_bytes(ANTH)


def test_the_flows_own_secrets_never_reach_the_record():
    secret = "sk-live-0123456789abcdef"
    st = FlowState("generate", Protocol(ANTH), Protocol(CHAT), "r", client_text=f'{{"k": "{secret}"}}',
                   translation=Plan.JSON, upstream_text=f"echo {secret}", secrets=(secret,),
                   warnings=[f"w {secret}"], upstream_headers=[("x-echo", secret)],
                   stop=StopInfo(StopReason.OTHER, message=f"bad key {secret}"))
    assert secret not in json.dumps(to_record(st).dump())


@pytest.mark.parametrize("raw, expect", [
    ({"foo": 1}, None),  # another addon's metadata under our key: not a record
    ({"client_protocol": "nope", "route": "r", "stop": "garbage"}, "r"),  # damaged: the readable fields
])
def test_foreign_and_damaged_metadata(raw, expect):
    f = make_flow(ANTH)
    f.metadata["proxai"] = raw
    rec = FlowRecord.of(f)
    assert (rec.route if rec is not None else None) == expect
    if rec is not None:
        assert rec.client_protocol is None and rec.stop is None


def test_flow_without_record():
    assert FlowRecord.of(make_flow(ANTH)) is None


def test_the_stored_dict_is_the_typed_records_schema():
    """Annotation stores record_dict (no validation on the hot path); FlowRecord reads it back to the
    same values, field for field."""
    from proxai_mitm.flow.state import record_dict

    st = FlowState("generate", Protocol(ANTH), Protocol(CHAT), "r", client_text="{}", translation="stream",
                   stop=StopInfo(StopReason.TOOL_USE, raw="tool_calls", detail={"n": 1}), usage=Usage(output=2),
                   upstream_text="data: x\n\n", upstream_status=200, upstream_headers=[("a", "b")],
                   upstream_chunks=[(0.5, 9)], upstream_cut=False, replay={"result": "sent", "upstream_url": "u"},
                   truncated=[("response", 1, 2)], warnings=["w"])
    raw = record_dict(st)
    assert set(raw) == set(FlowRecord.model_fields)
    rec = FlowRecord.model_validate(raw)
    assert json.loads(json.dumps(rec.dump())) == json.loads(json.dumps(raw))


def test_the_production_write_is_the_typed_schema():
    """What the addon writes (``record_dict``, stored without validation on the hot path) has exactly
    the fields of :class:`FlowRecord`, and on real flows written through mitmdump it validates and
    dumps back to the same values: nothing written is lost, renamed or of another type."""
    assert record_dict(FlowState("generate", Protocol(ANTH), Protocol(CHAT))).keys() == FlowRecord.model_fields.keys()
    files = sorted(FLOWS.glob("*.mitm"))
    assert files
    seen = 0
    for p in files:
        with open(p, "rb") as fh:
            for f in mio.FlowReader(fh).stream():
                raw = f.metadata.get(METADATA_KEY)
                if raw is None:
                    continue
                seen += 1
                # the example recordings may be one schema older (fields added since read as null)
                # until flows/make_flows.py regenerates them
                assert raw["version"] in (SCHEMA_VERSION, SCHEMA_VERSION - 1)
                added = {name: None for name in FlowRecord.model_fields if name not in raw}
                assert FlowRecord.model_validate(raw).dump() == {**raw, **added}, p.name
    assert seen >= 9  # every flow of the seven example recordings
