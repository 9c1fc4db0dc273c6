"""Sessions: which conversation an LLM flow belongs to, and the turn where a session's cache reads drop.

**The session id** of a generation is the client's own where it sends one in a header
(:data:`SESSION_HEADERS`, source ``header:<name>``), else derived from the conversation's stable
prefix (source ``prefix``): the start of the conversation's key (``proxai_core.caching.conversation_key``,
a hash of the system prompt, the tool names and the first user message of the decoded request; the
key the caching hints send upstream). The derived id holds no content and is the same for every turn
of one conversation (each turn resends that prefix); two conversations that start with the same
system prompt, tools and first message get the same one.

A header's id is kept as a digest of its value (12 hex digits, like a derived id), never the value:
recordings and spans treat a header named ``*session*`` as a credential and redact its value
everywhere (redaction/redact.py), which would merge every session of a recording into one
``<redacted>``; the digest groups the same way, is bounded, and reveals nothing of the value.

**The prefix fingerprints** kept with it (:func:`prefix_of`) are short hashes of the system prompt,
of the tool definitions and of each message (cache hints such as ``cache_control`` left out: moving a
breakpoint does not change the prefix). Comparing a turn's fingerprints with the previous turn's
tells what changed in the prefix, without keeping any content.

**Drops** (:func:`group_sessions`): within a session, a turn is compared with the earlier turns of
its own conversation (the same first message: a session id that a client keeps across side requests,
a title or a sub-agent, does not mix them). From a conversation's third turn on, a turn whose
cache-read share of its input is :data:`DROP_POINTS` or more below the conversation's running share
(its turns since the second, the first one filling the cache) is marked, with what changed since the
previous turn.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any

import orjson

from proxai_core import Exchange, Protocol
from proxai_core import neutral as n
from proxai_core.caching import conversation_key

__all__ = ["DROP_POINTS", "MAX_MESSAGES", "MAX_VALUE", "SESSION_HEADERS", "changes", "group_sessions",
           "header_session", "note_session_header", "prefix_of", "session_header", "session_of_body",
           "session_of_request", "session_of_state"]

#: Headers in which agents send their own session id, most specific first. These are facts of client
#: products, not of a wire protocol (the same agent sends its header on whichever protocol it
#: speaks, and a protocol's other clients send none), so no codec owns them.
SESSION_HEADERS = (
    "x-claude-code-session-id",  # Claude Code (one UUID per session)
    "session_id",  # Codex CLI (its conversation id); also pi
    "session-id",  # Codex CLI, newer releases
    "conversation_id",  # Codex CLI, older releases (next to session_id, the same value)
    "x-opencode-session",  # opencode toward its own gateway
    "x-session-affinity",  # opencode toward other providers; pi on Anthropic
)
_RANK = {name.encode(): i for i, name in enumerate(SESSION_HEADERS)}

#: bytes of a session header's value that count (a longer value is told apart by its start)
MAX_VALUE = 1024
#: messages fingerprinted per turn (a longer conversation's later messages are not compared)
MAX_MESSAGES = 1024
#: a turn's cache-read share this far below its conversation's running share is a drop
DROP_POINTS = 0.20
#: a prefix unchanged but this long after the previous turn: the provider's cache may have expired
_IDLE_S = 300.0


# ----------------------------------------------------------------------------- ids
#: the flow attribute holding the client's session header (name, id), or () for none, noted when the
#: request's headers arrive: a route may rewrite or drop them before the flow ends
_NOTED = "_proxai_session_header"


def note_session_header(flow: Any) -> None:
    """Note the client's session header of a live request as it arrived (``requestheaders``)."""
    setattr(flow, _NOTED, header_session(flow.request.headers.fields) or ())


def session_header(flow: Any) -> tuple[str, str] | None:
    """The client's session header: as noted on arrival, else read from the flow's request as it is
    (a flow read from a file, or one whose headers were never noted)."""
    found = getattr(flow, _NOTED, None)
    if found is None and getattr(flow, "request", None) is not None:
        found = header_session(flow.request.headers.fields)
    return found or None


def header_session(fields_: Iterable[tuple[bytes, bytes]]) -> tuple[str, str] | None:
    """(header name, id) of the most specific session header among raw header fields (mitmproxy's
    ``headers.fields``), or None. The id is a digest of the value (see the module docstring); the
    value alone counts, so a client sending the same id under two of the names gets one session."""
    best: tuple[int, bytes] | None = None
    for k, v in fields_:
        rank = _RANK.get(k.lower())
        if rank is not None and (best is None or rank < best[0]) and (value := v.strip()):
            best = (rank, value)
    if best is None:
        return None
    return SESSION_HEADERS[best[0]], _hash(best[1][:MAX_VALUE], 6)


# ----------------------------------------------------------------------------- fingerprints
def _hash(data: bytes, size: int) -> str:
    return hashlib.blake2b(data, digest_size=size).hexdigest()


#: per neutral class: its fields without cache hints (which move from turn to turn)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _plain(obj: Any) -> Any:
    """orjson's fallback for dataclasses (passed through to it): their values in field order, cache
    hints left out; anything else unknown as its repr."""
    names = _FIELDS.get(type(obj))
    if names is None:
        if not is_dataclass(obj):
            return repr(obj)
        names = _FIELDS[type(obj)] = tuple(f.name for f in fields(obj) if f.name != "cache_control")
    return [getattr(obj, k) for k in names]


def _dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj, default=_plain, option=orjson.OPT_PASSTHROUGH_DATACLASS)
    except TypeError:  # nested past orjson's 254 levels (a hostile tool schema): its repr still tells changes
        return repr(obj).encode("utf-8", "surrogatepass")


def _crc(parts: Iterable[Any], crc: int = 0) -> int:
    """CRC-32 (a change detector, fast on a long conversation) of parts: a text by its text, any
    other part by its JSON."""
    text, crc32 = n.Text, zlib.crc32
    for p in parts:
        if type(p) is text:
            crc = crc32(p.text.encode("utf-8", "surrogatepass"), crc32(b"\x00", crc))
        else:
            crc = crc32(_dumps(p), crc)
    return crc


def _fp_message(m: n.Message) -> str:
    start = zlib.crc32(m.role.encode() if m.name is None else f"{m.role}:{m.name}".encode())
    return f"{_crc(m.parts, start):08x}"


def prefix_of(req: n.Request) -> dict[str, Any]:
    """The derived session id and the prefix fingerprints of a decoded request (record.PrefixRecord's
    fields, plus ``id``)."""
    return {
        "id": conversation_key(req).removeprefix("proxai-")[:12],
        "system": f"{_crc(req.system):08x}" if req.system else None,
        "tools": f"{zlib.crc32(_dumps(req.tools)):08x}" if req.tools else None,
        "messages": [_fp_message(m) for m in req.messages[:MAX_MESSAGES]],
        "message_count": len(req.messages),
    }


def session_of_request(req: n.Request | None, header: tuple[str, str] | None) -> dict[str, Any] | None:
    """The record's ``session`` (record.SessionRecord's fields): the header's id, else the derived one;
    None when neither is known."""
    prefix = prefix_of(req) if req is not None else None
    derived = prefix.pop("id") if prefix is not None else None
    if header is not None:
        return {"id": header[1], "source": f"header:{header[0]}", "prefix": prefix}
    if derived is None:
        return None
    return {"id": derived, "source": "prefix", "prefix": prefix}


def session_of_state(state: Any, header: tuple[str, str] | None) -> dict[str, Any] | None:
    """The session of a live flow's generation (``state``: flow.state.FlowState). A translated
    request was decoded already; any other is decoded here on its own, so that its decoding adds no
    warning to a flow that was not translated."""
    req = None
    ex = state.exchange
    try:
        if ex is not None and state.translated:
            req = ex.request
        elif state.client_protocol is not None and isinstance(state.client_body, dict):
            req = Exchange(state.client_protocol, state.client_body, path=state.client_path).request
    except Exception:  # noqa: BLE001 - a request no decoder reads has no derived session
        req = None
    return session_of_request(req, header)


def session_of_body(protocol: Protocol | None, body: Any, path: str | None,
                    headers: Any = None) -> dict[str, Any] | None:
    """The session of a request read from a recording (a record without one, a plain capture): its
    headers as recorded, its body decoded here."""
    header = header_session(headers.fields) if headers is not None and hasattr(headers, "fields") else None
    req = None
    if protocol is not None and isinstance(body, dict):
        try:
            req = Exchange(protocol, body, path=path).request
        except Exception:  # noqa: BLE001 - a request no decoder reads has no derived session
            req = None
    return session_of_request(req, header)


# ----------------------------------------------------------------------------- what changed
def changes(prev: Mapping[str, Any] | None, cur: Mapping[str, Any] | None, prev_model: str | None,
            cur_model: str | None, gap_s: float | None) -> list[str]:
    """What changed in the prefix from one turn to the next (fingerprints of record.PrefixRecord)."""
    out = []
    if prev_model and cur_model and prev_model != cur_model:
        out.append(f"model changed ({prev_model} → {cur_model})")
    if prev is not None and cur is not None:
        if prev.get("system") != cur.get("system"):
            out.append("system prompt changed")
        if prev.get("tools") != cur.get("tools"):
            out.append("tools changed")
        a, b = prev.get("messages") or [], cur.get("messages") or []
        edited = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if edited is not None:
            out.append(f"earlier messages edited (from message {edited + 1})")
        elif (cur.get("message_count") or 0) < (prev.get("message_count") or 0):
            out.append("earlier messages removed")
    else:
        out.append("prefix unknown")
    if not out and gap_s is not None and gap_s >= _IDLE_S:
        out.append(f"prefix unchanged, {gap_s / 60:.0f} min after the previous turn (the cache may have expired)")
    elif not out:
        out.append("prefix unchanged")
    return out


# ----------------------------------------------------------------------------- grouping
def _share(cache_read: int | None, input_total: int | None) -> float | None:
    return None if not input_total else (cache_read or 0) / input_total


def _thread(prefix: Mapping[str, Any] | None) -> str | None:
    msgs = (prefix or {}).get("messages") or []
    return msgs[0] if msgs else None


def group_sessions(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Report rows (sorted by time) per session: turns, tokens, cache-read share, cost, stops, and the
    turns whose cache-read share dropped (see the module docstring). Rows without a session form one
    group with id None."""
    acc: dict[str | None, dict[str, Any]] = {}
    threads: dict[tuple[str | None, str | None], dict[str, Any]] = {}
    for r in rows:
        sid = r.get("session")
        s = acc.get(sid)
        if s is None:
            s = acc[sid] = {"session": sid, "source": r.get("session_source"), "turns": 0, "start": r.get("time"),
                            "end": r.get("time"), "models": [], "input_tokens": 0, "output_tokens": 0,
                            "cache_read_tokens": 0, "cache_write_tokens": 0, "cache_read_share": None,
                            "cost_usd": 0.0, "unpriced": 0, "untokened": 0, "stops": {}, "drops": [],
                            "exchanges": []}
        s["turns"] += 1
        s["end"] = r.get("time") or s["end"]
        s["exchanges"].append(r.get("id"))
        model = r.get("response_model") or r.get("model")
        if model and model not in s["models"]:
            s["models"].append(model)
        inp, cr = r.get("input_tokens"), r.get("cache_read_tokens")
        if inp is None and r.get("output_tokens") is None:
            s["untokened"] += 1
        for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            s[k] += r.get(k) or 0
        if r.get("cost_usd") is None:
            s["unpriced"] += 1
        else:
            s["cost_usd"] += r["cost_usd"]
        reason = r.get("reason") or "?"
        s["stops"][reason] = s["stops"].get(reason, 0) + 1
        _turn(s, threads.setdefault((sid, _thread(r.get("session_prefix"))), {"turns": 0, "read": 0, "input": 0}), r,
              inp, cr)
    out = sorted(acc.values(), key=lambda s: (s["session"] is None, s["start"] or ""))
    for s in out:
        s["cache_read_share"] = _round(_share(s["cache_read_tokens"], s["input_tokens"]))
        s["cost_usd"] = round(s["cost_usd"], 8)
    return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _turn(session: dict[str, Any], th: dict[str, Any], r: dict[str, Any], inp: int | None, cr: int | None) -> None:
    """One turn of a conversation: marked when its share drops; the running share and the previous
    turn updated."""
    th["turns"] += 1
    share = _share(cr, inp)
    if share is not None and th["turns"] >= 3 and th["input"]:
        running = th["read"] / th["input"]
        if share <= running - DROP_POINTS:
            ts, prev_ts = r.get("timestamp"), th.get("timestamp")
            gap = ts - prev_ts if ts and prev_ts else None
            session["drops"].append({
                "id": r.get("id"), "time": r.get("time"), "turn": th["turns"], "cache_read_share": _round(share),
                "running_share": _round(running),
                "changed": changes(th.get("prefix"), r.get("session_prefix"), th.get("model"), r.get("sent_model"),
                                   gap)})
    if share is not None and th["turns"] >= 2:  # the first turn fills the cache: not in the running share
        th["read"] += cr or 0
        th["input"] += inp or 0
    th["prefix"], th["model"], th["timestamp"] = r.get("session_prefix"), r.get("sent_model"), r.get("timestamp")
