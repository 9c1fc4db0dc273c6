"""Why a model stopped, in one vocabulary that every provider maps onto (docs/mapping.md).

The vocabulary's raw-value table is kept exactly; provider values it lacks are added after it.
Unknown values are ``OTHER`` with ``raw`` kept, never ``END_TURN``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["StopInfo", "StopReason", "StopKey", "WireStop", "classify_stop", "is_filter_refusal", "map_stop",
           "stop_key", "GENERIC_CONTENT_FILTER_REFUSAL", "GENERIC_REFUSAL"]

#: Seed ``002_…``: a ``content_filter`` ending with nothing produced becomes this refusal.
GENERIC_CONTENT_FILTER_REFUSAL = "The response was withheld by the provider's content filter."
#: A refusal that came with no text and no explanation still reaches a client as a refusal.
GENERIC_REFUSAL = "The model declined to respond to this request."


class StopReason(StrEnum):
    """Provider-neutral reason a model step ended. Only END_TURN and TOOL_USE are normal."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_OUTPUT = "max_output"
    CONTEXT_FULL = "context_full"
    REFUSAL = "refusal"
    PAUSED = "paused"
    INTERRUPTED = "interrupted"
    #: the request was refused before the model ran (an HTTP 4xx other than 408/429, a replay
    #: miss): nothing was generated; retrying it unchanged will not help
    REJECTED = "rejected"
    OTHER = "other"


_NO_DETAIL: Any = object()


@dataclass(frozen=True, slots=True, init=False)
class StopInfo:
    """Why one model step stopped, normalized, with what the provider said kept."""

    reason: StopReason
    raw: str | None = None
    category: str | None = None
    message: str | None = None
    recommended_model: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, reason: StopReason, raw: str | None = None, category: str | None = None,
                 message: str | None = None, recommended_model: str | None = None,
                 detail: Mapping[str, Any] = _NO_DETAIL) -> None:
        # the generated frozen __init__ goes through object.__setattr__ per field: twice as slow,
        # and one is built for every response and stream
        _set_reason(self, reason)
        _set_raw(self, raw)
        _set_category(self, category)
        _set_message(self, message)
        _set_recommended_model(self, recommended_model)
        _set_detail(self, {} if detail is _NO_DETAIL else detail)

    @property
    def ok(self) -> bool:
        return self.reason in (StopReason.END_TURN, StopReason.TOOL_USE)

    @property
    def refused(self) -> bool:
        return self.reason is StopReason.REFUSAL

    @property
    def truncated(self) -> bool:
        return self.reason in (StopReason.MAX_OUTPUT, StopReason.CONTEXT_FULL)

    def describe(self) -> str:
        """One line for a log or a notice, such as ``refusal (cyber): ...``."""
        head = self.reason.value
        label = self.category or (self.raw if self.raw not in (None, head) else None)
        if label:
            head = f"{head} ({label})"
        return f"{head}: {self.message}" if self.message else head

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values only (it lives in mitmproxy flow metadata)."""
        return {
            "reason": self.reason.value,
            "raw": self.raw,
            "category": self.category,
            "message": self.message,
            "recommended_model": self.recommended_model,
            "detail": _plain(self.detail),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StopInfo:
        try:
            reason = StopReason(str(d.get("reason")))
        except ValueError:
            reason = StopReason.OTHER
        return cls(
            reason=reason,
            raw=d.get("raw"),
            category=d.get("category"),
            message=d.get("message"),
            recommended_model=d.get("recommended_model"),
            detail=dict(d.get("detail") or {}),
        )


_set_reason, _set_raw, _set_category, _set_message, _set_recommended_model, _set_detail = (
    StopInfo.__dict__[f].__set__ for f in ("reason", "raw", "category", "message", "recommended_model", "detail"))


def _plain(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


_REASONS: dict[str, StopReason] = {
    # ---- the stop vocabulary's own table, kept exactly ----
    # Finished.
    "stop": StopReason.END_TURN,
    "end_turn": StopReason.END_TURN,
    "stop_sequence": StopReason.END_TURN,
    "completed": StopReason.END_TURN,
    # Asked for tools.
    "tool_calls": StopReason.TOOL_USE,
    "tool_use": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    # Limits.
    "length": StopReason.MAX_OUTPUT,
    "max_tokens": StopReason.MAX_OUTPUT,
    "max_output_tokens": StopReason.MAX_OUTPUT,
    "model_context_window_exceeded": StopReason.CONTEXT_FULL,
    "model_length": StopReason.CONTEXT_FULL,
    "context_length_exceeded": StopReason.CONTEXT_FULL,
    # Declined or blocked.
    "refusal": StopReason.REFUSAL,
    "content_filter": StopReason.REFUSAL,
    "sensitive": StopReason.REFUSAL,
    "safety": StopReason.REFUSAL,
    "recitation": StopReason.REFUSAL,
    "blocklist": StopReason.REFUSAL,
    "prohibited_content": StopReason.REFUSAL,
    "spii": StopReason.REFUSAL,
    "image_safety": StopReason.REFUSAL,
    "image_prohibited_content": StopReason.REFUSAL,
    "image_recitation": StopReason.REFUSAL,
    "jailbreak": StopReason.REFUSAL,
    "model_armor": StopReason.REFUSAL,
    # Handed back.
    "pause_turn": StopReason.PAUSED,
    # Ended by infrastructure.
    "error": StopReason.INTERRUPTED,
    "network_error": StopReason.INTERRUPTED,
    "insufficient_system_resource": StopReason.INTERRUPTED,
    "aborted": StopReason.INTERRUPTED,
}

#: Provider values the table above lacks (the table wins wherever both name a value).
_EXTRA_REASONS: dict[str, StopReason] = {
    "reason_stop": StopReason.END_TURN,
    "reason_tool_calls": StopReason.TOOL_USE,
    "reason_max_len": StopReason.MAX_OUTPUT,
    "reason_max_context": StopReason.CONTEXT_FULL,
    "content_filtered": StopReason.REFUSAL,
    "guardrail_intervened": StopReason.REFUSAL,
    "compaction": StopReason.PAUSED,
    "cancelled": StopReason.INTERRUPTED,
    "failed": StopReason.INTERRUPTED,
    "reason_time_limit": StopReason.INTERRUPTED,
}
for _k, _v in _EXTRA_REASONS.items():
    _REASONS.setdefault(_k, _v)

#: Categories for values that have no provider category of their own.
_MALFORMED = {
    "malformed_function_call",
    "unexpected_tool_call",
    "too_many_tool_calls",
    "malformed_tool_use",
    "malformed_model_output",
}


def classify_stop(
    raw: str | None,
    *,
    has_tool_calls: bool = False,
    category: str | None = None,
    message: str | None = None,
    recommended_model: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> StopInfo:
    """Turn a provider's raw stop value into a :class:`StopInfo`."""
    if raw is None:
        reason = StopReason.TOOL_USE if has_tool_calls else StopReason.END_TURN
    else:
        key = raw.strip().lower()
        reason = _REASONS.get(key, StopReason.OTHER)
        if reason is StopReason.END_TURN and has_tool_calls:
            reason = StopReason.TOOL_USE
        if category is None and key in _MALFORMED:
            category = "malformed-output"
    if category is None and raw is not None and reason in (StopReason.REFUSAL, StopReason.INTERRUPTED):
        category = raw
    return StopInfo(reason, raw, category, message, recommended_model, dict(detail) if detail else {})


# ----------------------------------------------------------------------------- toward a client
class StopKey(StrEnum):
    """The stop decision every encoder maps (its ``stop_table``): a :class:`StopReason`, with the
    refusal split into a model's stated refusal and a filter's withholding."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_OUTPUT = "max_output"
    CONTEXT_FULL = "context_full"
    #: the model said it declines (Anthropic ``refusal``, a refusal part / ``message.refusal``)
    REFUSAL = "refusal"
    #: a provider filter withheld the output (``content_filter``, ``sensitive``, ``safety``, ...)
    FILTERED = "filtered"
    PAUSED = "paused"
    INTERRUPTED = "interrupted"
    REJECTED = "rejected"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class WireStop:
    """One protocol's stop value for a :class:`StopKey`.

    ``value``: the wire value (Chat finish_reason, Anthropic stop_reason, Responses status);
    ``detail``: its companion where the protocol has one (Responses incomplete reason);
    ``exact``: False when the value is only the closest (the encoder warns, naming the raw value).
    """

    value: str
    detail: str | None = None
    exact: bool = True


#: raw values of a model's own stated refusal; every other refusal value is a filter's
_STATED_REFUSALS = frozenset({"refusal"})


def is_filter_refusal(stop: StopInfo) -> bool:
    """A REFUSAL a provider filter produced (its raw value is a refusal value other than a stated
    refusal), as opposed to the model's refusal (Anthropic ``refusal``; a refusal part or
    ``message.refusal`` whose raw is the finish value, e.g. ``stop``/``completed``)."""
    if stop.reason is not StopReason.REFUSAL or not isinstance(stop.raw, str):
        return False
    key = stop.raw.strip().lower()
    return key not in _STATED_REFUSALS and _REASONS.get(key) is StopReason.REFUSAL


_KEY_OF_REASON = {
    StopReason.END_TURN: StopKey.END_TURN,
    StopReason.TOOL_USE: StopKey.TOOL_USE,
    StopReason.MAX_OUTPUT: StopKey.MAX_OUTPUT,
    StopReason.CONTEXT_FULL: StopKey.CONTEXT_FULL,
    StopReason.REFUSAL: StopKey.REFUSAL,
    StopReason.PAUSED: StopKey.PAUSED,
    StopReason.INTERRUPTED: StopKey.INTERRUPTED,
    StopReason.REJECTED: StopKey.REJECTED,
    StopReason.OTHER: StopKey.OTHER,
}


def stop_key(stop: StopInfo, has_tool_calls: bool) -> StopKey:
    """The one decision every encoder starts from. An unknown value with tool calls in the output is
    TOOL_USE (the client must still run them); a refusal is stated or filtered."""
    r = stop.reason
    if r is _REFUSAL:
        return StopKey.FILTERED if is_filter_refusal(stop) else StopKey.REFUSAL
    if r is _OTHER and has_tool_calls:
        return _TOOL_USE_KEY
    return _KEY_OF_REASON[r]


# (module constants: the stop of every stream reads them, an enum attribute costs a lookup more)
_REFUSAL, _OTHER, _TOOL_USE_KEY = StopReason.REFUSAL, StopReason.OTHER, StopKey.TOOL_USE


def check_stop_table(table: dict[StopKey, WireStop], label: str) -> dict[StopKey, WireStop]:
    """A codec's stop table maps every :class:`StopKey` (checked when the codec is imported)."""
    missing = [k.value for k in StopKey if k not in table]
    if missing:
        raise AssertionError(f"{label} stop table lacks {', '.join(missing)}")
    return table


def map_stop(table: Mapping[StopKey, WireStop], stop: StopInfo, has_tool_calls: bool, label: str,
             warnings: list[str]) -> WireStop:
    """``stop`` as the client protocol's value, from its table. Where the value is only the closest,
    a warning names the raw value the upstream sent."""
    key = stop_key(stop, has_tool_calls)
    wire = table[key]
    if not wire.exact or (key is _TOOL_USE_KEY and stop.reason is _OTHER):
        sent = wire.value if wire.detail is None else f"{wire.value} ({wire.detail})"
        msg = (f"stop reason {stop.reason.value} (raw {stop.raw!r}) has no {label} equivalent: "
               f"sent as {sent}")
        if msg not in warnings:
            warnings.append(msg)
    return wire
