"""views.py + contentview.py: the summary header, the record's usage, the other side of a translation."""

from __future__ import annotations

import time

from mitmproxy import contentviews
from mitmproxy import flow as mflow

from proxai_mitm.reporting import contentview
from proxai_mitm.reporting.contentview import LLMContentview
from proxai_mitm.reporting.views import ClientRequestView, UpstreamResponseView

from ..helpers import ANTH, CHAT, feed, make_flow, respond, sse_bytes


def _view(view, f, msg) -> str:
    md = contentviews.Metadata(flow=f, http_message=msg, content_type=msg.headers.get("content-type"))
    return view.prettify(msg.get_content(strict=False) or b"", md)


def _translated_stream(addon, *, cut: bool = False):
    addon.configure(proxai_target=ANTH)
    f = make_flow(CHAT, stream=True)  # the client asks Chat Completions without stream_options: no usage chunk
    f.request.timestamp_start = time.time()
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    f.response.timestamp_start = time.time()
    addon.responseheaders(f)
    data = sse_bytes(ANTH, "text")
    if cut:
        f.response.stream(data[:120])
        f.error = mflow.Error("upstream connection lost")
        f.response.timestamp_end = None
        addon.error(f)
    else:
        feed(f, data)
        f.response.timestamp_end = time.time()
        addon.response(f)
    return f


def test_translated_stream_header_has_the_usage_and_measures(addon):
    f = _translated_stream(addon)
    out = _view(LLMContentview(), f, f.response)
    head = out.split("\n\n", 1)[0]
    assert "protocols  OpenAI Chat Completions → Anthropic Messages (translated)" in head
    assert "stop       end_turn" in head
    assert "tokens     input 21 · output 9" in head
    assert "TTFT " in head and "TTFT ?" not in head and "duration " in head
    assert "cost       $" in head and "claude-sonnet-4-5" in head
    assert "answered claude-sonnet-4-5-20250929" in head and "asked gpt-4o" in head
    # the conversation follows, with the record's usage (the client's stream carried none)
    assert "── assistant ──" in out and "usage: input 21 · output 9" in out
    req = _view(LLMContentview(), f, f.request)
    assert req.startswith("─") and "tokens     input 21" in req and "LLM client request" in req


def test_cut_stream_says_unknown_never_zero(addon):
    f = _translated_stream(addon, cut=True)
    out = _view(LLMContentview(), f, f.response)
    assert "stop       interrupted" in out
    assert "input 0" not in out and "output 0" not in out
    assert "TTFT ?" in out or "TTFT " in out


def test_other_side_views(addon):
    f = _translated_stream(addon)
    client = _view(ClientRequestView(), f, f.response)  # works from either tab
    assert "OpenAI Chat Completions request" in client and "before ProxAI rewrote it" in client
    assert '"stream": true' in client  # the raw body follows
    up = _view(UpstreamResponseView(), f, f.request)
    assert "Anthropic Messages response" in up and "before translation" in up
    assert "event: message_start" in up  # the raw upstream SSE
    plain = make_flow(CHAT)
    respond(plain, 200, b"{}", "application/json")
    assert "no ProxAI record" in _view(ClientRequestView(), plain, plain.request)
    md = contentviews.Metadata(flow=f, http_message=f.response, content_type="text/event-stream")
    assert ClientRequestView().render_priority(b"{}", md) < 0  # never auto-selected


def test_views_registered():
    contentview.register()
    for name in ("LLM", "LLM client request", "LLM upstream response"):
        assert contentviews.registry[name.lower()].name == name
