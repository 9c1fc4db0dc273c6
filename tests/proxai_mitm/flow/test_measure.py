"""metrics.py / cost.py / measure.py: time to first token, duration, tokens/s and cost per flow."""

from __future__ import annotations

import time

import genai_prices
import pytest

from proxai_core import Exchange, Protocol
from proxai_mitm.flow.cost import price
from proxai_mitm.flow.measure import flow_summary, measure_flow
from proxai_mitm.flow.metrics import first_content_offset, summary_line, timings
from proxai_mitm.flow.record import FlowRecord
from tests.fake_upstream import RECORDED, _enc_event

from ..helpers import ANTH, CHAT, RESP, json_bytes, make_flow, respond


def _expected_usd(model: str, inp: int, out: int, cread: int = 0, cwrite: int = 0, provider: str | None = None):
    u = genai_prices.Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cread or None,
                           cache_write_tokens=cwrite or None)
    return float(genai_prices.calc_price(u, model, provider_id=provider).total_price)


def _events(proto: str, scenario: str = "text") -> list[bytes]:
    return [_enc_event(e) for e in RECORDED[proto][scenario]["sse"]]


# ----------------------------------------------------------------------------- pure helpers
def _seen(proto: str, events: list[bytes], content_type: str = "text/event-stream") -> list[bool]:
    """After each upstream event fed to a pass-through exchange: has the first content been seen?"""
    ex = Exchange(Protocol(proto), None, stream=True)
    ex.respond(Protocol(proto), 200, content_type)
    seen = []
    for e in events:
        ex.feed(e)
        seen.append(ex.first_content is not None)
    return seen


@pytest.mark.parametrize("proto", [CHAT, RESP, ANTH])
def test_first_content_is_the_first_content_event_not_the_first_byte(proto):
    evs = _events(proto)
    seen = _seen(proto, evs)
    first = seen.index(True)
    assert first > 0, "the opening metadata event is not content"
    assert all(seen[first:])
    # the event that made it true carries generated text
    assert b"Hello" in evs[first] or b"delta" in evs[first]


def test_first_content_tool_call_and_refusal_count():
    for proto, scenario in ((CHAT, "tool"), (ANTH, "tool"), (RESP, "tool"), (CHAT, "refusal"), (ANTH, "refusal")):
        assert any(_seen(proto, _events(proto, scenario))), (proto, scenario)


#: a Gemini stream framed as one JSON array (a client that asked without ``alt=sse``), in three reads
GEMINI_ARRAY = [
    b'[{"candidates": [{"content": {"role": "model", "parts": []}}], "modelVersion": "gemini-2.5-flash"}\r\n',
    b',{"candidates": [{"content": {"role": "model", "parts": [{"text": "Hello"}]}}]}\r\n',
    b',{"candidates": [{"content": {"role": "model", "parts": [{"text": "!"}]}, "finishReason": "STOP"}],'
    b' "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5}}]',
]


def test_time_to_first_token_of_a_gemini_json_array_stream():
    """A stream framed as one JSON array is read by its protocol's own reader: its first content is
    found (it never was when a second SSE reader watched every stream)."""
    seen = _seen(Protocol.GEMINI.value, GEMINI_ARRAY, "application/json")
    assert seen == [False, True, True]
    body = b"".join(GEMINI_ARRAY)
    chunks = [(float(i * 100), len(e)) for i, e in enumerate(GEMINI_ARRAY)]
    assert first_content_offset(Protocol.GEMINI, body, chunks) == (100.0, "gemini-2.5-flash")


def test_first_content_offset_from_recorded_chunks():
    evs = _events(ANTH)
    body = b"".join(evs)
    chunks = [(float(i * 100), len(e)) for i, e in enumerate(evs)]
    first = next(i for i, e in enumerate(evs) if b"text_delta" in e)
    assert first_content_offset(Protocol(ANTH), body, chunks) == (first * 100.0, "claude-sonnet-4-5-20250929")
    assert first_content_offset(Protocol(ANTH), body[:50], chunks)[0] is None  # cut before the content
    assert first_content_offset(Protocol(ANTH), body, None) == (None, None)


def test_timings_streamed_and_complete():
    t = timings(100.0, 100.2, 100.5, 101.5, 100, streamed=True)
    assert (t.headers_ms, t.ttft_ms, t.duration_ms) == (200.0, 500.0, 1500.0)
    assert t.output_tps == 100.0  # 100 tokens over the 1 s from first content to end
    t = timings(100.0, 100.2, None, 101.0, 50, streamed=False)
    assert t.ttft_ms == t.duration_ms == 1000.0 and t.output_tps == 50.0
    t = timings(100.0, 100.2, None, 101.0, 50, streamed=True)
    assert t.ttft_ms is None and t.output_tps == 50.0  # no content seen: the rate over the whole duration
    assert timings(None, None, None, None, 5, streamed=True).duration_ms is None
    assert timings(100.0, None, None, None, None, streamed=False).output_tps is None


def test_summary_line_unknowns_are_unknown():
    line = summary_line("gpt-4o", "end_turn", 21, 9, 512.3, 0.000123)
    assert line == "end_turn · 21→9 tok · TTFT 512 ms · $0.0001 · gpt-4o"
    line = summary_line(None, None, None, None, None, None)
    assert line == "stop ? · ?→? tok · TTFT ? · cost unknown · model ?"
    assert "$0" not in line


def test_price_known_unknown_and_missing_tokens():
    c = price("gpt-4o", "api.openai.com", input_total=1000, output=200)
    assert c.usd == pytest.approx(_expected_usd("gpt-4o", 1000, 200, provider="openai")) and c.usd > 0
    assert c.provider == "openai"
    c = price("claude-sonnet-4-5", "api.anthropic.com", input_total=1000, output=100, cache_read=600,
              cache_write=100)
    assert c.usd == pytest.approx(_expected_usd("claude-sonnet-4-5", 1000, 100, 600, 100, provider="anthropic"))
    # cached input is cheaper than fresh input
    assert c.usd < price("claude-sonnet-4-5", "api.anthropic.com", input_total=1000, output=100).usd
    c = price("my-private-finetune-xyz", "127.0.0.1:8080", input_total=10, output=5)
    assert c.usd is None and "no price" in c.note
    assert price("gpt-4o", None, input_total=None, output=None).usd is None
    assert price(None, None, input_total=1, output=1).usd is None
    # a host the database does not know: the model name alone finds the price
    assert price("gpt-4o", "127.0.0.1:9999", input_total=1000, output=200).usd == pytest.approx(
        _expected_usd("gpt-4o", 1000, 200, provider="openai"))


# ----------------------------------------------------------------------------- through the addon chain
def _stamp_request(f):
    f.request.timestamp_start = time.time()
    f.request.timestamp_end = f.request.timestamp_start + 0.001


@pytest.mark.parametrize("client, upstream", [(CHAT, ANTH), (ANTH, ANTH), (RESP, CHAT), (CHAT, CHAT)])
def test_streamed_ttft_is_the_first_content_event(addon, client, upstream):
    """Translated and pass-through streams: TTFT is when the first content event arrived, after the
    metadata events; duration ends with the stream; the rate is over the generation."""
    if client != upstream:
        addon.configure(proxai_target=upstream)
    f = make_flow(client, stream=True)
    _stamp_request(f)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    f.response.timestamp_start = time.time()
    addon.responseheaders(f)
    evs = _events(upstream)
    first = _seen(upstream, evs).index(True)
    for i, e in enumerate(evs):
        if i == first:
            time.sleep(0.15)  # the model "thinks" after the metadata events
        f.response.stream(e)
    time.sleep(0.05)
    f.response.stream(b"")
    f.response.timestamp_end = time.time()
    addon.response(f)
    rec = FlowRecord.of(f)
    m = rec.metrics
    assert m is not None and m.start == f.request.timestamp_start
    assert m.ttft_ms >= 150 and m.ttft_ms >= m.headers_ms + 150
    assert m.duration_ms >= m.ttft_ms + 50
    assert m.duration_ms == pytest.approx((f.response.timestamp_end - f.request.timestamp_start) * 1000, abs=0.2)
    if rec.usage and rec.usage.output:
        gen_s = (m.duration_ms - m.ttft_ms) / 1000
        assert m.output_tps == pytest.approx(rec.usage.output / gen_s, rel=0.01)
    # the model that answered is priced (the recorded models are in the price database)
    assert m.response_model == RECORDED[upstream]["text"]["json"]["model"]
    assert m.cost_usd is not None and m.cost_usd > 0 and m.cost_note is None
    assert f.metadata["proxai"]["metrics"]["ttft_ms"] == m.ttft_ms  # in the saved record
    assert "TTFT " in f.comment and "$" in f.comment and "end_turn" in f.comment


@pytest.mark.parametrize("client, upstream", [(CHAT, ANTH), (ANTH, ANTH), (ANTH, RESP)])
def test_complete_ttft_is_the_body_arrival(addon, client, upstream):
    if client != upstream:
        addon.configure(proxai_target=upstream)
    f = make_flow(client)
    _stamp_request(f)
    addon.request(f)
    respond(f, 200, json_bytes(upstream), "application/json")
    f.response.timestamp_start = f.request.timestamp_start + 0.4
    f.response.timestamp_end = f.request.timestamp_start + 0.9
    addon.responseheaders(f)
    addon.response(f)
    rec = FlowRecord.of(f)
    m = rec.metrics
    assert m.headers_ms == pytest.approx(400, abs=0.2)
    assert m.ttft_ms == m.duration_ms == pytest.approx(900, abs=0.2)
    u = rec.usage
    assert m.output_tps == pytest.approx(u.output / (m.duration_ms / 1000), rel=0.01)
    assert m.response_model == RECORDED[upstream]["text"]["json"]["model"]
    provider = "anthropic" if upstream == ANTH else "openai"
    assert m.cost_usd == pytest.approx(_expected_usd(m.response_model, u.input_total, u.output, u.cache_read or 0,
                                                     u.cache_write or 0, provider=provider))
    assert m.cost_provider == provider


def test_unknown_price_is_unknown_never_zero(addon):
    body = {"model": "acme-private-7b", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    f = make_flow(ANTH, body=body, host="127.0.0.1", port=8080)
    _stamp_request(f)
    addon.request(f)
    data = json_bytes(ANTH).replace(b"claude-sonnet-4-5-20250929", b"acme-private-7b")
    respond(f, 200, data, "application/json")
    addon.responseheaders(f)
    addon.response(f)
    m = FlowRecord.of(f).metrics
    assert m.cost_usd is None and "acme-private-7b" in m.cost_note
    assert " · cost unknown · " in f.comment and "$0" not in f.comment


def test_cut_stream_keeps_unknowns(addon):
    addon.configure(proxai_target=ANTH)
    f = make_flow(CHAT, stream=True)
    _stamp_request(f)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    f.response.timestamp_start, f.response.timestamp_end = time.time(), None  # as mitmproxy leaves a cut one
    addon.responseheaders(f)
    evs = _events(ANTH)
    f.response.stream(evs[0])  # message_start only, then the connection breaks
    from mitmproxy import flow as mflow
    f.error = mflow.Error("connection closed by upstream")
    addon.error(f)
    rec = FlowRecord.of(f)
    assert rec.stop.reason == "interrupted"
    assert rec.metrics.ttft_ms is None and "TTFT ?" in f.comment
    assert rec.metrics.duration_ms is not None


def test_offline_recorded_stream_gets_ttft_from_chunk_times(addon):
    """An older recording without measures: the chunk times of the recorded stream give the TTFT."""
    addon.configure(proxai_target=ANTH)
    f = make_flow(CHAT, stream=True)
    _stamp_request(f)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    f.response.timestamp_start = f.request.timestamp_start + 0.2
    addon.responseheaders(f)
    for e in _events(ANTH):
        f.response.stream(e)
    f.response.stream(b"")
    f.response.timestamp_end = f.request.timestamp_start + 2
    addon.response(f)
    raw = dict(f.metadata["proxai"])
    raw.pop("metrics")
    raw["upstream_chunks"] = [[float(i * 100), len(e)] for i, e in enumerate(_events(ANTH))]
    g = f.copy()
    g.metadata["proxai"] = raw
    rec = FlowRecord.of(g)
    assert rec.metrics is None
    m = measure_flow(g, rec)
    first = next(i for i, e in enumerate(_events(ANTH)) if b"text_delta" in e)
    assert m.ttft_ms == pytest.approx(200 + first * 100, abs=0.2)
    assert m.duration_ms == pytest.approx(2000, abs=0.2) and m.cost_usd > 0
    rec.metrics = m
    assert "claude" in flow_summary(rec)


def test_record_without_metrics_still_reads():
    rec = FlowRecord.from_dict({"version": 2, "kind": "generate", "client_protocol": CHAT})
    assert rec is not None and rec.metrics is None
    rec = FlowRecord.from_dict({"version": 2, "metrics": {"ttft_ms": "bad"}, "client_protocol": CHAT})
    assert rec is not None and rec.client_protocol is Protocol.CHAT  # salvaged


def test_mitmweb_comment_column_on_unless_the_user_chose_columns():
    from mitmproxy import options as moptions
    from mitmproxy.tools.web.webaddons import WebAddon

    from proxai_mitm.addons.webcolumns import enable_comment_column

    opts = moptions.Options()
    assert not enable_comment_column(opts)  # mitmdump: no such option
    opts = moptions.Options()
    WebAddon().load(opts)
    assert "comment" not in opts.web_columns
    assert enable_comment_column(opts)
    assert opts.web_columns[-1] == "comment" and "path" in opts.web_columns
    assert not enable_comment_column(opts)  # idempotent
    opts = moptions.Options()
    WebAddon().load(opts)
    opts.update(web_columns=["path", "status"])
    assert not enable_comment_column(opts) and opts.web_columns == ["path", "status"]


@pytest.mark.parametrize("model", ["gpt-4o-2024-08-06", "gpt-4o-mini", "gpt-5", "claude-sonnet-4-5-20250929",
                                   "claude-opus-4-1", "claude-haiku-4-5", "gemini-2.5-pro", "o3"])
@pytest.mark.parametrize("counts", [(50, 5, 0, 0), (12_345, 678, 1_000, 300), (250_000, 4_000, 20_000, 5_000)])
def test_price_equals_genai_prices_own_calculation(model, counts):
    """The per-flow price (computed without genai-prices' generic machinery when that gives the same
    result) equals calc_price, below and above tiered thresholds."""
    inp, out, cread, cwrite = counts
    u = genai_prices.Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cread or None,
                           cache_write_tokens=cwrite or None)
    try:
        ref = float(genai_prices.calc_price(u, model).total_price)
    except LookupError:
        pytest.skip(f"{model} not in this genai-prices snapshot")
    c = price(model, None, input_total=inp, output=out, cache_read=cread, cache_write=cwrite)
    assert c.usd == pytest.approx(ref, rel=1e-12, abs=1e-15)


def test_price_is_cheap_enough_for_the_event_loop():
    price("gpt-4o", "api.openai.com", input_total=1, output=1)  # the database loaded (addon: in a thread)
    t = time.perf_counter()
    for i in range(200):
        price("claude-sonnet-4-5-20250929", "127.0.0.1:8080", input_total=1000 + i, output=50 + i)
    assert (time.perf_counter() - t) / 200 < 0.0005  # well under genai-prices' ~0.6 ms per calc_price


def test_live_time_to_first_token_of_a_gemini_json_array_stream(addon):
    """A Gemini client that streams without ``alt=sse`` reads one JSON array, passed through: its
    TTFT is when the chunk with the first text arrived (it was never measured before)."""
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    f = make_flow(ANTH, body=body, path="/v1beta/models/gemini-2.5-flash:streamGenerateContent",
                  headers=[("x-goog-api-key", "AIzaCLIENT")])
    _stamp_request(f)
    addon.request(f)
    respond(f, 200, None, "application/json")
    f.response.timestamp_start = time.time()
    addon.responseheaders(f)
    assert f.response.stream  # a stream in the protocol's own framing
    f.response.stream(GEMINI_ARRAY[0])
    time.sleep(0.15)  # the model "thinks" before its first text
    for chunk in GEMINI_ARRAY[1:]:
        f.response.stream(chunk)
    f.response.stream(b"")
    f.response.timestamp_end = time.time()
    addon.response(f)
    rec = FlowRecord.of(f)
    assert rec is not None and rec.stop is not None and rec.stop.reason == "end_turn"
    m = rec.metrics
    assert m is not None and m.ttft_ms is not None and m.ttft_ms >= m.headers_ms + 150
