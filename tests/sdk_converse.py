"""Bedrock Converse judges: botocore's own ``bedrock-runtime`` service model and event-stream parser.

Requests are validated by botocore's ParamValidator against the operation's input shape; complete
bodies by a walk over the ``Converse`` output shape (required members, no unknown member, one
member of a union, scalar types); streams are read by botocore's ``EventStream`` with the
``ConverseStream`` response parser (exception frames raise as they do for a boto3 client), and
each event is walked against its shape.
"""

from __future__ import annotations

import base64
import json
from functools import cache
from typing import Any

import botocore.session
from botocore.eventstream import EventStream, EventStreamError
from botocore.model import OperationModel, Shape
from botocore.parsers import EventStreamJSONParser, create_parser
from botocore.validate import ParamValidator


class ConverseStreamError(Exception):
    """An exception frame (or a broken stream) where a boto3 client raises."""


@cache
def _model() -> Any:
    return botocore.session.get_session().get_service_model("bedrock-runtime")


@cache
def operation(name: str) -> OperationModel:
    return _model().operation_model(name)


def _blobs(shape: Shape, value: Any) -> Any:
    """A JSON body -> the Python params botocore validates (base64 blob strings as bytes)."""
    t = shape.type_name
    if t == "structure" and isinstance(value, dict):
        members = shape.members  # type: ignore[attr-defined]
        return {k: _blobs(members[k], v) if k in members else v for k, v in value.items()}
    if t == "list" and isinstance(value, list):
        return [_blobs(shape.member, v) for v in value]  # type: ignore[attr-defined]
    if t == "map" and isinstance(value, dict):
        return {k: _blobs(shape.value, v) for k, v in value.items()}  # type: ignore[attr-defined]
    if t == "blob" and isinstance(value, str):
        return base64.b64decode(value, validate=True)
    return value


def validate_request(body: dict, op: str = "Converse", model: str = "anthropic.claude-sonnet-4-6") -> None:
    """A Converse / ConverseStream / CountTokens request body (the model lives in the URL)."""
    shape = operation(op).input_shape
    params = _blobs(shape, dict(body, modelId=body.get("modelId", model)))
    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        raise AssertionError(report.generate_report())


def walk(shape: Shape, value: Any, where: str = "", *, exact: bool = True) -> None:
    """``value`` (JSON as the wire carries it) conforms to ``shape``. ``exact`` False (a real
    recording: the service answers members and values newer than botocore's model) allows unknown
    members and enum values."""
    t = shape.type_name
    if getattr(shape, "is_document_type", False):
        return  # (any JSON value: tool input, additional model fields)
    if t == "structure":
        assert isinstance(value, dict), f"{where}: expected an object, got {value!r:.80}"
        members = shape.members  # type: ignore[attr-defined]
        unknown = set(value) - set(members)
        assert not unknown or not exact, f"{where}: unknown members {sorted(unknown)}"
        value = {k: v for k, v in value.items() if k in members}
        if shape.is_tagged_union:  # type: ignore[attr-defined]
            assert len(value) == 1, f"{where}: a union needs exactly one member, got {sorted(value)}"
        for req in shape.required_members:  # type: ignore[attr-defined]
            assert req in value, f"{where}: required member {req} missing"
        for k, v in value.items():
            walk(members[k], v, f"{where}.{k}", exact=exact)
    elif t == "list":
        assert isinstance(value, list), f"{where}: expected a list"
        for i, v in enumerate(value):
            walk(shape.member, v, f"{where}[{i}]", exact=exact)  # type: ignore[attr-defined]
    elif t == "map":
        assert isinstance(value, dict), f"{where}: expected a map"
        for k, v in value.items():
            walk(shape.value, v, f"{where}.{k}", exact=exact)  # type: ignore[attr-defined]
    elif t == "string":
        assert isinstance(value, str), f"{where}: expected a string, got {value!r:.80}"
        enum = shape.enum
        assert not enum or value in enum or not exact, f"{where}: {value!r} not in {enum}"
    elif t in ("integer", "long"):
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: expected an integer"
    elif t in ("float", "double"):
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{where}: expected a number"
    elif t == "boolean":
        assert isinstance(value, bool), f"{where}: expected a boolean"
    elif t == "blob":
        assert isinstance(value, str), f"{where}: expected a base64 string"
        base64.b64decode(value, validate=True)
    elif t == "timestamp":
        assert isinstance(value, (str, int, float)), f"{where}: expected a timestamp"
    # ("document": any JSON value)


def validate_response(body: dict, *, exact: bool = True) -> None:
    walk(operation("Converse").output_shape, body, "Converse", exact=exact)


def validate_error(status: int, body: dict, headers: dict[str, str]) -> str:
    """A Converse error answer as botocore reads it: the error code it raises (from the header)."""
    parser = create_parser("rest-json")
    parsed = parser.parse({"status_code": status, "headers": headers, "body": json.dumps(body).encode()},
                          operation("Converse").output_shape)
    code = parsed["Error"]["Code"]
    assert parsed["Error"]["Message"] == body["message"]
    return str(code)


class _Raw:
    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size = data, size

    def stream(self):
        for i in range(0, len(self.data), self.size):
            yield self.data[i:i + self.size]


def events_of_stream(data: bytes, chunk: int = 4096) -> list[dict[str, Any]]:
    """The events botocore's ConverseStream parser reads (raises ConverseStreamError where a
    boto3 client raises)."""
    op = operation("ConverseStream")
    stream_shape = op.output_shape.members["stream"]
    es = EventStream(_Raw(data, chunk), stream_shape, EventStreamJSONParser(), "ConverseStream")
    out = []
    try:
        for ev in es:
            out.append(ev)
    except EventStreamError as e:
        raise ConverseStreamError(f"{e.response['Error'].get('Code')}: {e}") from e
    except Exception as e:  # a CRC or framing error: botocore's own
        raise ConverseStreamError(f"{type(e).__name__}: {e}") from e
    return out


def accumulate(data: bytes, *, strict: bool = True, exact: bool = True) -> dict[str, Any]:
    """A Converse stream -> the complete Converse response it adds up to, checked as a client
    library reads it: every event walked against its shape, blocks by ``contentBlockIndex``."""
    from botocore.eventstream import EventStreamBuffer

    buf = EventStreamBuffer()
    buf.add_data(data)
    shape = operation("ConverseStream").output_shape.members["stream"]
    for msg in buf:  # the wire JSON of each event, walked against its shape
        h = msg.headers
        if h.get(":message-type") == "event":
            name = h[":event-type"]
            payload = json.loads(msg.payload)
            payload.pop("p", None)
            walk(shape.members[name], payload, name, exact=exact)
    events = events_of_stream(data)
    blocks: dict[int, dict[str, Any]] = {}
    args: dict[int, str] = {}
    stop = None
    usage = None
    started = False
    fields = None
    trace = None
    for ev in events:
        (name, body), = ev.items()
        if name == "messageStart":
            started = True
        elif name == "contentBlockStart":
            start = body["start"]
            if "toolResult" in start:
                blocks[body["contentBlockIndex"]] = {"toolResult": dict(start["toolResult"], content=[])}
            else:
                blocks[body["contentBlockIndex"]] = {"toolUse": dict(start["toolUse"])}
                args[body["contentBlockIndex"]] = ""
        elif name == "contentBlockDelta":
            i, d = body["contentBlockIndex"], body["delta"]
            if "text" in d:
                b = blocks.setdefault(i, {"text": ""})
                assert "text" in b, f"text delta to block {i} of another kind"
                b["text"] += d["text"]
            elif "toolUse" in d:
                assert i in args, f"toolUse delta to block {i} without its start"
                args[i] += d["toolUse"]["input"]
            elif "toolResult" in d:
                blocks[i]["toolResult"]["content"] += d["toolResult"]
            elif "reasoningContent" in d:
                rc = d["reasoningContent"]
                b = blocks.setdefault(i, {"reasoningContent": {}})
                if "redactedContent" in rc:
                    b["reasoningContent"] = {"redactedContent": base64.b64encode(rc["redactedContent"]).decode()}
                else:
                    rt = b["reasoningContent"].setdefault("reasoningText", {"text": ""})
                    if "text" in rc:
                        rt["text"] += rc["text"]
                    if "signature" in rc:
                        rt["signature"] = rt.get("signature", "") + rc["signature"]
        elif name == "messageStop":
            stop = body["stopReason"]
            fields = body.get("additionalModelResponseFields")
        elif name == "metadata":
            usage = body["usage"]
            trace = body.get("trace")
    if strict:
        assert started, "no messageStart"
        assert stop is not None, "no messageStop"
        assert usage is not None, "no metadata"
    for i, a in args.items():
        try:
            blocks[i]["toolUse"]["input"] = json.loads(a) if a.strip() else {}
        except json.JSONDecodeError:  # (arguments cut by the output limit: a client keeps the text)
            assert not strict or stop in ("max_tokens", "model_context_window_exceeded"), f"block {i}: arguments {a!r:.80}"
            blocks[i]["toolUse"]["input"] = a
    out: dict[str, Any] = {"output": {"message": {"role": "assistant",
                                                  "content": [blocks[i] for i in sorted(blocks)]}},
                           "stopReason": stop or "end_turn", "usage": usage or {"inputTokens": 0, "outputTokens": 0,
                                                                                 "totalTokens": 0},
                           "metrics": {"latencyMs": 0}}
    if fields:
        out["additionalModelResponseFields"] = fields
    if trace:
        out["trace"] = trace
    return out


def summarize(body: dict, s: Any) -> Any:
    """The Summary of a complete Converse body (an error body: its message)."""
    if "output" not in body and isinstance(body.get("message"), str):
        s.error = body["message"]
        return s
    for b in body["output"]["message"]["content"]:
        if "text" in b:
            s.text += b["text"]
        elif "toolUse" in b and b["toolUse"].get("type") in (None, "tool_use"):
            s.tool_calls.append((b["toolUse"]["name"], b["toolUse"]["input"]))
        elif "reasoningContent" in b:
            s.reasoning = True
    s.stop = body["stopReason"]
    if s.stop in ("content_filtered", "guardrail_intervened"):
        s.refusal = s.text or None
    u = body["usage"]
    s.usage = {"input": u["inputTokens"], "output": u["outputTokens"]}
    return s
