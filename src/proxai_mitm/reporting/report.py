"""Reports and exports of recorded LLM exchanges, with or without the addon's record.

A flow recorded through the addon carries its :class:`~.record.FlowRecord` (read with
:meth:`FlowRecord.of`, any schema version). A plain mitmproxy capture has none: then everything is
derived from the bodies (protocol from the path, StopInfo from the JSON body or the SSE stream), so
reports work on any recording of Chat Completions, Responses or Anthropic Messages traffic.

Wired into the commands ``proxai.report`` / ``proxai.export`` and ``python -m proxai_mitm``.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from proxai_core import Exchange, Protocol
from proxai_core import neutral as n
from proxai_core.api import stop_of_error

from ..flow.analysis import BodyInfo, analyze_response, compact_part, compact_request
from ..flow.record import FlowRecord, read_body
from ..flow.session import session_of_body
from ..redaction.flowfile import read_path
from ..replay.index import canonical_key
from ..wire.protocols import SHORT, json_or_none, protocol_from_path, request_model, request_stream

logger = logging.getLogger(__name__)

__all__ = [
    "exchange",
    "export_command",
    "export_jsonl",
    "format_table",
    "protocol_from_path",
    "read_flows",
    "report_command",
    "rows",
]


# ----------------------------------------------------------------------------- flows
def _iso(ts: float | None) -> str | None:
    if not ts:
        return None
    return _dt.datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")


def is_llm_flow(flow: Any) -> bool:
    req = getattr(flow, "request", None)
    if req is None:
        return False
    rec = FlowRecord.of(flow)
    if rec is not None and (rec.client_protocol or rec.upstream_protocol):
        return True
    return req.method.upper() == "POST" and protocol_from_path(req.path) is not None


def _summary(flow: Any, *, full: bool) -> dict[str, Any] | None:
    """The normalized exchange of one flow (the record first, derived where missing)."""
    if not is_llm_flow(flow):
        return None
    req = flow.request
    resp = getattr(flow, "response", None)
    rec = FlowRecord.of(flow)
    path_proto = protocol_from_path(req.path)
    upstream = (rec.upstream_protocol if rec else None) or path_proto
    client = (rec.client_protocol if rec else None) or upstream
    req_body = read_body(req)
    client_obj = json_or_none(rec.client_body(flow) if rec else req_body)
    upstream_obj = json_or_none(req_body)

    status = resp.status_code if resp is not None else None
    if rec is not None:  # the upstream's own answer (kept, or the flow's when the client got it unchanged)
        body, body_proto = rec.upstream_body(flow), upstream
        status_for_body = rec.upstream_status if rec.upstream_status is not None else status
        ctype = None if rec.upstream_response is not None else _ctype(resp)
    else:
        body, body_proto, status_for_body, ctype = read_body(resp), path_proto or client, status, _ctype(resp)

    info: BodyInfo | None = None
    if resp is not None and body is not None and (full or rec is None or rec.stop is None or rec.usage is None):
        info = analyze_response(body, body_proto, status=status_for_body, content_type=ctype)

    if rec is not None and rec.stop is not None:
        stop: dict[str, Any] | None = rec.stop.model_dump()
    elif info is not None and info.stop is not None:
        stop = info.stop.to_dict()
    elif getattr(flow, "error", None) is not None:
        stop = stop_of_error(n.Error(kind=n.ErrorKind.INTERRUPTED, message=str(flow.error.msg))).to_dict()
    else:
        stop = None
    if rec is not None and rec.usage is not None:
        usage: dict[str, Any] | None = rec.usage.model_dump()
    else:
        usage = info.usage.to_dict() if info is not None and info.usage is not None else None

    client_model = (rec.client_model if rec else None) or request_model(client_obj)
    upstream_model = (rec.upstream_model if rec else None) or request_model(upstream_obj)
    model = client_model or upstream_model or (info.model if info else None)
    stream = request_stream(client_obj) if isinstance(client_obj, dict) else None

    warnings = list(rec.warnings) if rec is not None else []
    if info is not None and rec is None:
        warnings.extend(info.warnings)

    out: dict[str, Any] = {
        "id": flow.id,
        "time": _iso(req.timestamp_start or getattr(flow, "timestamp_created", None)),
        "timestamp": req.timestamp_start,
        "method": req.method,
        "host": req.pretty_host,
        "path": req.path.split("?", 1)[0],
        "client_protocol": client.value if client else None,
        "upstream_protocol": upstream.value if upstream else None,
        "route": rec.route if rec else None,
        "model": model,
        "upstream_model": upstream_model,  # as sent; exchange() puts the answered one first
        "stream": stream,
        "status": status,
        "stop": stop,
        "usage": usage,
        "warnings": warnings,
        "annotation": "metadata" if rec is not None and rec.stop is not None else "derived",
        # the record's, else derived from the request as recorded (older records, plain captures);
        # generations only (a token count or a model list is not a turn)
        "session": rec.session.model_dump() if rec is not None and rec.session is not None
        else None if rec is not None and rec.kind != "generate"
        else session_of_body(client, client_obj, req.path, req.headers),
        "attempts": [a.model_dump() for a in rec.attempts] if rec is not None and rec.attempts else None,
    }
    if getattr(flow, "error", None) is not None:
        out["error"] = str(flow.error.msg)
    if full:
        _details(out, flow, info, client_obj, client, upstream_obj, upstream, req_body)
    return out


def _details(out: dict[str, Any], flow: Any, info: BodyInfo | None, client_obj: Any, client: Protocol | None,
             upstream_obj: Any, upstream: Protocol | None, req_body: bytes | None) -> None:
    req, resp = flow.request, getattr(flow, "response", None)
    # the key proxai_replay matches this exchange by (the request as sent upstream)
    out["replay_key"] = canonical_key(req.method, req.path, req_body or b"")
    conv: dict[str, Any] | None = None
    for obj, proto in ((client_obj, client), (upstream_obj, upstream)):
        if isinstance(obj, dict) and proto is not None:
            try:
                conv = compact_request(Exchange(proto, obj).request)
                break
            except Exception as e:  # noqa: BLE001
                out["warnings"].append(f"could not decode the {proto.value} request: {e}")
    out["request"] = conv
    if info is not None and info.response is not None:
        out["response"] = {"id": info.response.id, "model": info.response.model,
                           "parts": [compact_part(p) for p in info.response.parts]}
    elif info is not None and info.error is not None:
        out["response"] = {"error": {"kind": info.error.kind, "message": info.error.message,
                                     "status": info.error.status}}
    else:
        out["response"] = None
    t0 = req.timestamp_start
    timing: dict[str, Any] = {"start": t0}
    if resp is not None and t0:
        if resp.timestamp_start:
            timing["first_byte_ms"] = round((resp.timestamp_start - t0) * 1000, 1)
        if resp.timestamp_end:
            timing["duration_ms"] = round((resp.timestamp_end - t0) * 1000, 1)
    out["timing"] = timing


def _ctype(resp: Any) -> str | None:
    return resp.headers.get("content-type") if resp is not None else None


def _as_protocol(v: Any) -> Protocol | None:
    try:
        return Protocol(v) if v else None
    except ValueError:
        return None


def exchange(flow: Any) -> dict[str, Any] | None:
    """The normalized exchange of one flow (None when it is not an LLM flow), with its measures."""
    ex = _summary(flow, full=True)
    if ex is not None:
        ex["metrics"] = _measures(flow, ex)
        # the model the upstream answered with (a dated version, say), else the one it was asked for
        answered = ex["metrics"].get("response_model") or (ex.get("response") or {}).get("model")
        ex["upstream_model"] = answered or ex["upstream_model"]
        sess = ex["session"]
        ex["session"] = {"id": sess["id"], "source": sess["source"]} if sess else None  # no fingerprints
    return ex


def _short(p: str | None) -> str:
    pr = _as_protocol(p)
    return SHORT.get(pr, p or "?") if pr else (p or "?")


def rows(flows: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per LLM exchange, sorted by time: time, client → upstream protocol, model, reason,
    category, tokens, status, route, url path, and the measures (TTFT, duration, tokens/s, cost)."""
    out = []
    for f in flows:
        try:
            s = _summary(f, full=False)
        except Exception as e:  # noqa: BLE001 - one odd flow must not kill the report
            s = {"id": getattr(f, "id", None), "time": None, "client_protocol": None,
                 "upstream_protocol": None, "model": None, "stop": None, "usage": None, "status": None,
                 "route": None, "path": getattr(getattr(f, "request", None), "path", None),
                 "warnings": [f"report failed: {e}"]}
        if s is None:
            continue
        stop = s.get("stop") or {}
        usage = s.get("usage") or {}
        inp = usage.get("input_total")
        if inp is None:
            inp = usage.get("input")
        model = s.get("model")
        measures = _measures(f, s)
        # the record's upstream model is the one sent (a route's mapping) or, when nothing was mapped,
        # the one the upstream reported: only a mapping is shown as "asked → sent"
        sent = s.get("upstream_model")
        if sent and sent != model and sent != measures.get("response_model"):
            model = f"{model} → {sent}" if model else sent
        sess = s.get("session") or {}
        out.append({
            "time": s.get("time"),
            "client_protocol": s.get("client_protocol"),
            "upstream_protocol": s.get("upstream_protocol"),
            "model": model,
            "reason": stop.get("reason"),
            "category": stop.get("category"),
            "message": stop.get("message"),
            "input_tokens": inp,
            "output_tokens": usage.get("output"),
            "status": s.get("status"),
            "route": s.get("route"),
            "path": s.get("path"),
            "id": s.get("id"),
            "attempts": s.get("attempts"),
            "fallback": (stop.get("detail") or {}).get("fallback"),
            **measures,
            "session": sess.get("id"),
            "session_source": sess.get("source"),
            # for the drops of a session (session.group_sessions): never in an output
            "session_prefix": sess.get("prefix"),
            "sent_model": sent or s.get("model"),
        })
    out.sort(key=lambda r: r.get("timestamp") or 0.0)  # by time, whatever the file order
    return out


def _measures(flow: Any, s: dict[str, Any]) -> dict[str, Any]:
    from ..flow.measure import measure_row

    return measure_row(flow, s)


def format_table(table_rows: Sequence[dict[str, Any]]) -> str:
    """An aligned plain-text table of :func:`rows` output with totals per model (reportfmt.py)."""
    from .reportfmt import table

    return table(table_rows)


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS)


def export_jsonl(flows: Iterable[Any], path: str | Path) -> int:
    """Write one JSON line per LLM exchange (:func:`exchange`) to ``path``; returns the count."""
    count = 0
    with open(Path(path).expanduser(), "wb") as fh:
        for f in flows:
            try:
                ex = exchange(f)
            except Exception as e:  # noqa: BLE001
                ex = {"id": getattr(f, "id", None), "warnings": [f"export failed: {e}"]}
            if ex is None:
                continue
            fh.write(_dumps(ex) + b"\n")
            count += 1
    return count


def report_command(flows: Sequence[Any]) -> str:
    """Body of the addon command ``proxai.report``."""
    return format_table(rows(flows))


def export_command(flows: Sequence[Any], path: str) -> str:
    """Body of the addon command ``proxai.export``."""
    count = export_jsonl(flows, path)
    return f"exported {count} LLM exchange(s) to {path}"


def read_flows(path: str | Path, damaged: list[Any] | None = None) -> list[Any]:
    """HTTP flows of a .mitm file, or of every ``*.mitm`` file in a folder (sorted by name). A damaged
    file gives its intact flows before the damage; the damage (flowfile.Damage) is appended to
    ``damaged``, or logged when no list is given."""
    flows, damages = read_path(path)
    for d in damages:
        if damaged is not None:
            damaged.append(d)
        else:
            logger.warning("proxai: %s", d)
    return flows
