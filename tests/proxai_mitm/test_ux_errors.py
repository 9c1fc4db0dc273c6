"""What the user sees of an upstream error: ``rejected`` vs ``interrupted``, where an injected key came
from (client message, StopInfo, comment), ``retry-after`` kept and shown; the comment's order."""

from __future__ import annotations

import json

import pytest

from proxai_mitm.flow.measure import _notes
from proxai_mitm.flow.metrics import summary_line

from .helpers import ANTH, CHAT, json_bytes, make_flow, respond

KEY_VAR, KEY = "PROXAI_UX_KEY", "sk-ant-ux-secret-0123456789"
UNAUTHORIZED = b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'


def _answer(addon, f, status, body, headers=()):
    respond(f, status, body, "application/json", list(headers))
    addon.responseheaders(f)
    addon.response(f)


def test_upstream_401_names_the_key_variable_for_a_chat_client(addon, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com", proxai_key_env=KEY_VAR)
    f = make_flow(CHAT, host="api.openai.com")
    addon.request(f)
    _answer(addon, f, 401, UNAUTHORIZED)
    err = json.loads(f.response.content)["error"]
    note = f"(the key came from ${KEY_VAR}, route default)"
    assert f.response.status_code == 401 and err["message"] == f"invalid x-api-key {note}"
    stop = f.metadata["proxai"]["stop"]
    assert (stop["reason"], stop["category"]) == ("rejected", "authentication")
    assert stop["message"] == f"invalid x-api-key {note}"
    assert f.comment.startswith("rejected (authentication) · ") and f.comment.endswith(note)
    assert f.marked == ":x:"
    assert KEY not in f.comment and KEY not in f.response.text and KEY not in json.dumps(f.metadata)


def test_same_protocol_401_keeps_the_upstream_body_and_adds_the_note(addon, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com", proxai_key_env=KEY_VAR)
    f = make_flow(ANTH, host="proxy.local")
    addon.request(f)
    _answer(addon, f, 401, UNAUTHORIZED)
    body = json.loads(f.response.content)
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    assert body["error"]["message"].endswith(f"(the key came from ${KEY_VAR}, route default)")
    m = f.metadata["proxai"]
    assert m["translation"] == "error" and m["upstream_response"] == UNAUTHORIZED.decode()  # the upstream's words


def test_client_own_key_gets_no_note(addon):
    addon.configure(proxai_target=ANTH)  # same host: the client's own credential goes upstream
    f = make_flow(CHAT)
    addon.request(f)
    _answer(addon, f, 401, UNAUTHORIZED)
    assert "key came from" not in f.response.text and "key came from" not in f.comment
    assert f.metadata["proxai"]["stop"]["reason"] == "rejected"


def test_a_403_names_the_variable_a_429_does_not(addon, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com", proxai_key_env=KEY_VAR)
    f = make_flow(CHAT, host="api.openai.com")
    addon.request(f)
    _answer(addon, f, 403, b'{"type":"error","error":{"type":"permission_error","message":"no access"}}')
    assert "key came from" in f.response.text and f.metadata["proxai"]["stop"]["reason"] == "rejected"
    g = make_flow(CHAT, host="api.openai.com")
    addon.request(g)
    _answer(addon, g, 429, b'{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}')
    assert "key came from" not in g.response.text and g.metadata["proxai"]["stop"]["reason"] == "interrupted"


def test_retry_after_is_kept_recorded_and_shown(addon):
    addon.configure(proxai_target=ANTH)
    f = make_flow(CHAT)
    addon.request(f)
    _answer(addon, f, 529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            [("retry-after", "30"), ("retry-after-ms", "30000")])
    assert f.response.status_code == 503 and f.response.headers["retry-after"] == "30"
    assert f.response.headers["retry-after-ms"] == "30000"
    stop = f.metadata["proxai"]["stop"]
    assert stop["reason"] == "interrupted" and stop["detail"]["retry_after"] == "30"
    assert stop["detail"]["retry_after_ms"] == "30000"
    assert f.comment.startswith("interrupted (overloaded) · ") and " · retry after 30000 ms · Overloaded" in f.comment
    assert f.marked == ":electric_plug:"


def test_comment_starts_with_the_stop_reason(addon):
    addon.configure(proxai_target=ANTH, proxai_model="claude-sonnet-4-5")
    f = make_flow(CHAT)
    addon.request(f)
    _answer(addon, f, 200, json_bytes(ANTH, "refusal"))
    head, *rest = f.comment.split(" · ")
    assert head.startswith("refusal") and rest[0].endswith(" tok") and rest[1].startswith("TTFT ")
    assert rest[3] == "gpt-4o→claude-sonnet-4-5-20250929", f.comment


def test_summary_line_order_and_notes():
    line = summary_line("gpt-4o→claude-sonnet-4-5", "refusal (cyber)", 21, 12, 50, 0.0002)
    assert line == "refusal (cyber) · 21→12 tok · TTFT 50 ms · $0.0002 · gpt-4o→claude-sonnet-4-5"
    assert summary_line("m", "end_turn", 1, 1, None, None, ("x",)).endswith(" · m · x")


@pytest.mark.parametrize("reason,message,detail,notes", [
    ("rejected", "bad", {"status": 400}, ("bad",)),
    ("interrupted", "Overloaded", {"status": 529, "retry_after": "7"}, ("retry after 7 s", "Overloaded")),
    ("interrupted", "cut", {}, ()),  # a cut stream: its message stays in the record and the log line
    ("interrupted", None, {"status": 503, "retry_after": "Wed, 21 Oct 2026 07:28:00 GMT"},
     ("retry after Wed, 21 Oct 2026 07:28:00 GMT",)),
    ("refusal", "I can't", {}, ()),
    ("rejected", "x" * 500, {"status": 400}, ("x" * 159 + "…",)),
])
def test_notes(reason, message, detail, notes):
    assert _notes(reason, message, detail) == notes
