"""StopInfo / classify_stop: seed 004's table, kept exactly, every row a named test."""

from __future__ import annotations

import json

import pytest

from proxai_core import StopInfo, StopReason, classify_stop

R = StopReason

# The seed's table, copied row by row: (raw, reason)
SEED_TABLE = [
    ("stop", R.END_TURN),
    ("end_turn", R.END_TURN),
    ("stop_sequence", R.END_TURN),
    ("completed", R.END_TURN),
    ("tool_calls", R.TOOL_USE),
    ("tool_use", R.TOOL_USE),
    ("function_call", R.TOOL_USE),
    ("length", R.MAX_OUTPUT),
    ("max_tokens", R.MAX_OUTPUT),
    ("max_output_tokens", R.MAX_OUTPUT),
    ("model_context_window_exceeded", R.CONTEXT_FULL),
    ("model_length", R.CONTEXT_FULL),
    ("context_length_exceeded", R.CONTEXT_FULL),
    ("refusal", R.REFUSAL),
    ("content_filter", R.REFUSAL),
    ("sensitive", R.REFUSAL),
    ("safety", R.REFUSAL),
    ("recitation", R.REFUSAL),
    ("blocklist", R.REFUSAL),
    ("prohibited_content", R.REFUSAL),
    ("spii", R.REFUSAL),
    ("image_safety", R.REFUSAL),
    ("image_prohibited_content", R.REFUSAL),
    ("image_recitation", R.REFUSAL),
    ("jailbreak", R.REFUSAL),
    ("model_armor", R.REFUSAL),
    ("pause_turn", R.PAUSED),
    ("error", R.INTERRUPTED),
    ("network_error", R.INTERRUPTED),
    ("insufficient_system_resource", R.INTERRUPTED),
    ("aborted", R.INTERRUPTED),
]

# Values of wire-facts §5.1 the seed lacks.
EXTENDED = [
    ("compaction", R.PAUSED),
    ("content_filtered", R.REFUSAL),
    ("guardrail_intervened", R.REFUSAL),
    ("cancelled", R.INTERRUPTED),
    ("failed", R.INTERRUPTED),
    ("REASON_STOP", R.END_TURN),
    ("REASON_MAX_LEN", R.MAX_OUTPUT),
    ("REASON_MAX_CONTEXT", R.CONTEXT_FULL),
    ("REASON_TIME_LIMIT", R.INTERRUPTED),
    ("REASON_TOOL_CALLS", R.TOOL_USE),
    ("MALFORMED_FUNCTION_CALL", R.OTHER),
    ("FINISH_REASON_UNSPECIFIED", R.OTHER),
]


def test_members_are_the_seed_members():
    assert [m.value for m in StopReason] == [
        "end_turn", "tool_use", "max_output", "context_full", "refusal", "paused", "interrupted", "rejected",
        "other",
    ]


@pytest.mark.parametrize("raw,reason", SEED_TABLE, ids=[r for r, _ in SEED_TABLE])
def test_seed004_table_row(raw, reason):
    info = classify_stop(raw)
    assert info.reason is reason
    assert info.raw == raw


@pytest.mark.parametrize("raw,reason", SEED_TABLE, ids=[r.upper() for r, _ in SEED_TABLE])
def test_seed004_lookup_ignores_case_and_keeps_raw(raw, reason):
    info = classify_stop(raw.upper())
    assert info.reason is reason
    assert info.raw == raw.upper()


@pytest.mark.parametrize("raw,reason", EXTENDED, ids=[r for r, _ in EXTENDED])
def test_wire_facts_extension_row(raw, reason):
    assert classify_stop(raw).reason is reason


def test_seed_wins_over_extension():
    # every seed row still maps as the seed says after the extension was merged
    for raw, reason in SEED_TABLE:
        assert classify_stop(raw).reason is reason


def test_unknown_value_is_other_never_end_turn():
    info = classify_stop("brand_new_reason")
    assert info.reason is R.OTHER
    assert info.raw == "brand_new_reason"
    assert not info.ok


def test_no_value_is_end_turn_or_tool_use():
    assert classify_stop(None).reason is R.END_TURN
    assert classify_stop(None, has_tool_calls=True).reason is R.TOOL_USE


def test_finished_with_tool_calls_is_tool_use():
    assert classify_stop("stop", has_tool_calls=True).reason is R.TOOL_USE
    assert classify_stop("end_turn", has_tool_calls=True).reason is R.TOOL_USE
    # other reasons are not overridden by tool calls
    assert classify_stop("length", has_tool_calls=True).reason is R.MAX_OUTPUT


def test_refusal_and_interruption_take_raw_as_category():
    assert classify_stop("content_filter").category == "content_filter"
    assert classify_stop("network_error").category == "network_error"
    assert classify_stop("refusal", category="cyber").category == "cyber"
    assert classify_stop("length").category is None


def test_properties():
    assert classify_stop("stop").ok and classify_stop("tool_calls").ok
    assert classify_stop("refusal").refused and not classify_stop("refusal").ok
    assert classify_stop("length").truncated and classify_stop("model_length").truncated
    assert not classify_stop("pause_turn").truncated


def test_describe():
    assert classify_stop("end_turn").describe() == "end_turn"
    assert classify_stop("stop").describe() == "end_turn (stop)"
    info = classify_stop("refusal", category="cyber", message="Declined.")
    assert info.describe() == "refusal (cyber): Declined."
    assert classify_stop("max_tokens").describe() == "max_output (max_tokens)"


def test_to_dict_is_plain_json_and_round_trips():
    info = classify_stop("refusal", category="bio", message="m", recommended_model="claude-x",
                         detail={"stop_details": {"type": "refusal"}, "n": (1, 2)})
    d = info.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert set(d) == {"reason", "raw", "category", "message", "recommended_model", "detail"}
    back = StopInfo.from_dict(d)
    assert back.reason is R.REFUSAL and back.recommended_model == "claude-x"


def test_stopinfo_is_frozen():
    info = classify_stop("stop")
    with pytest.raises(AttributeError):
        info.reason = R.OTHER  # type: ignore[misc]


def test_map_stop_of_an_unknown_value_with_tool_calls_is_tool_use_and_warns_once():
    """The client must still run the calls: TOOL_USE from the table, one warning naming the raw
    value however often the stop is mapped; without tool calls the same value is the table's OTHER."""
    from proxai_core.stop import StopKey, WireStop, map_stop

    table = {k: WireStop(k.value, exact=k is not StopKey.OTHER) for k in StopKey}
    info = classify_stop("eos")
    assert info.reason is R.OTHER and info.raw == "eos"
    w: list[str] = []
    assert map_stop(table, info, True, "X", w) is table[StopKey.TOOL_USE]
    assert map_stop(table, info, True, "X", w) is table[StopKey.TOOL_USE]
    assert len(w) == 1 and "'eos'" in w[0] and "sent as tool_use" in w[0]
    w2: list[str] = []
    assert map_stop(table, info, False, "X", w2) is table[StopKey.OTHER]
    assert len(w2) == 1 and "sent as other" in w2[0]
    assert map_stop(table, classify_stop("stop"), False, "X", w2) is table[StopKey.END_TURN] and len(w2) == 1
