"""Semantic comparison of a source result and its translation (shared by the sweep tests)."""

from __future__ import annotations

import re

from proxai_core import Protocol, StopReason

from ..sdk import A, B, C, G, R, Summary

# What each protocol can say about a neutral stop reason, and which reasons survive the trip.
_LOSSY = {
    # (target, source reason) -> reason the target can express
    (C, StopReason.PAUSED): StopReason.END_TURN,
    (R, StopReason.PAUSED): StopReason.END_TURN,
    (C, StopReason.CONTEXT_FULL): StopReason.MAX_OUTPUT,
    (R, StopReason.CONTEXT_FULL): StopReason.MAX_OUTPUT,
    (C, StopReason.OTHER): StopReason.END_TURN,
    (R, StopReason.OTHER): StopReason.END_TURN,
    (A, StopReason.OTHER): StopReason.END_TURN,
    (C, StopReason.INTERRUPTED): StopReason.END_TURN,
    (A, StopReason.INTERRUPTED): StopReason.END_TURN,
    (G, StopReason.PAUSED): StopReason.END_TURN,
    (G, StopReason.CONTEXT_FULL): StopReason.MAX_OUTPUT,
    (G, StopReason.INTERRUPTED): StopReason.OTHER,
    (B, StopReason.PAUSED): StopReason.END_TURN,
    (B, StopReason.OTHER): StopReason.END_TURN,
    (B, StopReason.INTERRUPTED): StopReason.END_TURN,
}


def expected_reason(target: Protocol, reason: StopReason) -> StopReason:
    return _LOSSY.get((target, reason), reason)


def _norm(s: str | None) -> str:
    return re.sub(r"\s+", " ", s or "").strip()


def assert_same_semantics(src: Summary, dst: Summary, src_reason: StopReason, dst_reason: StopReason,
                          target: Protocol, *, where: str = "") -> None:
    # tool calls: same names and JSON-equal arguments, same order
    assert [n for n, _ in dst.tool_calls] == [n for n, _ in src.tool_calls], where
    for (_, sa), (_, da) in zip(src.tool_calls, dst.tool_calls):
        if isinstance(sa, str) and src_reason is StopReason.MAX_OUTPUT:
            continue  # arguments cut by the output limit are not JSON; clients parse them their own way
        assert da == sa, f"{where}: arguments {da!r} != {sa!r}"
    # stop: the normalized reason survives (modulo what the target cannot say)
    want = expected_reason(target, src_reason)
    if dst_reason is not want and src_reason is not StopReason.OTHER:
        raise AssertionError(f"{where}: stop {dst_reason} != {want} (source {src_reason})")
    # refusal stays a refusal, never plain text / empty success
    if src_reason is StopReason.REFUSAL:
        assert dst_reason is StopReason.REFUSAL, where
        assert _norm(dst.refusal) or _norm(dst.text), f"{where}: refusal lost its text"
    # text: nothing lost (a refusal may move between the text and the refusal slot)
    src_all = _norm((src.text or "") + (src.refusal or ""))
    dst_all = _norm((dst.text or "") + (dst.refusal or ""))
    if src_reason is not StopReason.REFUSAL:
        assert _norm(dst.text) == _norm(src.text), f"{where}: text differs"
        assert _norm(dst.refusal) == _norm(src.refusal), f"{where}: refusal differs"
    else:
        assert src_all in dst_all or dst_all in src_all or _norm(src.text) in dst_all, f"{where}: refusal text"
    if src.reasoning:
        assert dst.reasoning, f"{where}: reasoning dropped"


def summary_from_neutral(resp) -> Summary:
    """Summary of a decoded (neutral) response: tolerant of real recordings the SDKs reject."""
    import json as _json

    from proxai_core import neutral as n

    s = Summary()
    s.model = resp.model
    for p in resp.parts:
        if isinstance(p, n.Text):
            s.text += p.text
        elif isinstance(p, n.Refusal):
            s.refusal = (s.refusal or "") + p.text
        elif isinstance(p, n.ToolCall):
            if p.kind == "custom":
                s.tool_calls.append((p.name, p.arguments))
            else:
                try:
                    s.tool_calls.append((p.name, _json.loads(p.arguments) if p.arguments else {}))
                except ValueError:
                    s.tool_calls.append((p.name, p.arguments))
        elif isinstance(p, n.Reasoning):
            s.reasoning = True
    s.stop = resp.stop.reason.value if resp.stop else None
    return s
