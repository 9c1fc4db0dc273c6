"""The fake upstream itself: replies, stream pacing and cuts, request recording, control API."""

from __future__ import annotations

import json

import httpx2
import pytest

from tests.fake_upstream import RECORDED, FakeUpstream, Reply


@pytest.fixture(scope="module")
def up():
    u = FakeUpstream().start()
    yield u
    u.stop()


def test_defaults_and_recording(up):
    up.reset()
    with httpx2.Client(base_url=up.url) as h:
        r = h.post("/v1/messages", json={"model": "m", "stream": False}, headers={"x-api-key": "k"})
        assert r.json() == RECORDED["anthropic_messages"]["text"]["json"]
        r = h.post("/v1/chat/completions", json={"model": "m", "stream": True})
        assert r.headers["content-type"].startswith("text/event-stream") and r.text.endswith("data: [DONE]\n\n")
    assert up.requests[0].header("x-api-key") == "k" and up.requests[0].json()["model"] == "m"


def test_control_api_and_errors(up):
    up.reset()
    with httpx2.Client(base_url=up.url) as h:
        reply = Reply.error(429, "<html>slow</html>", "text/html", headers=[("retry-after", "3")])
        h.post("/__fake/on", json={"path": "/v1/responses", "stream": None, "reply": reply.to_json()})
        r = h.post("/v1/responses", json={"input": "x"})
        assert r.status_code == 429 and r.headers["retry-after"] == "3" and r.text == "<html>slow</html>"
        got = h.get("/__fake/requests").json()
        assert [g["path"] for g in got] == ["/v1/responses"] and json.loads(got[0]["body"]) == {"input": "x"}
        h.post("/__fake/reset")
    assert up.requests == []


def test_stream_cut_reset_and_clean(up):
    up.reset()
    events = RECORDED["openai_chat_completions"]["text"]["sse"]
    up.on("/a/chat/completions", Reply.sse(events, cut_after=2, cut="clean"))
    up.on("/b/chat/completions", Reply.sse(events, cut_after=2, cut="reset"))
    with httpx2.Client(base_url=up.url) as h:
        r = h.post("/a/chat/completions", json={"stream": True})
        assert r.text.count("data:") == 2
        with pytest.raises(httpx2.HTTPError):
            h.post("/b/chat/completions", json={"stream": True})


@pytest.mark.parametrize("path", ["/v1beta/messages", "/v1beta/chat/completions", "/v1beta/responses",
                                  "/v1/projects/p/locations/l/publishers/google/messages", "/messages",
                                  "/v1/models/gemini-x:generateContent/extra", "/api/v1/chat/completions"])
def test_defaults_answer_only_the_real_paths(up, path):
    up.reset()
    with httpx2.Client(base_url=up.url) as h:
        r = h.post(path, json={"model": "m", "stream": False})
    assert r.status_code == 404, path


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages",
                                  "/v1beta/models/gemini-2.5-flash:generateContent",
                                  "/v1/models/gemini-2.5-flash:generateContent",
                                  "/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:generateContent"])
def test_defaults_answer_the_real_paths(up, path):
    up.reset()
    with httpx2.Client(base_url=up.url) as h:
        r = h.post(path, json={"model": "m", "stream": False})
    assert r.status_code == 200, (path, r.text)


@pytest.mark.parametrize("path, ok", [
    ("/v1/messages?beta=true", True), ("/v1/chat/completions?beta=true", False), ("/v1/responses?beta=true", False),
    ("/v1beta/models/g:streamGenerateContent?alt=sse", True), ("/v1beta/models/g:generateContent?beta=true", False),
    ("/v1beta/models/g:generateContent?key=AIza&alt=json", True)])
def test_unknown_query_parameters_are_the_providers_400(up, path, ok):
    up.reset()
    up.on(path.partition("?")[0], Reply.json({"ok": True}))  # a registered reply does not lift the check
    with httpx2.Client(base_url=up.url) as h:
        r = h.post(path, json={"model": "m"})
    assert (r.status_code == 200) is ok, (path, r.text)
