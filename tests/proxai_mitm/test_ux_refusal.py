"""The route option ``refusal_in_content`` and the global ``proxai_refusal_in_content``: from the routes
file / option to the Chat encoder, complete bodies and streams."""

from __future__ import annotations

import json

import pytest

from proxai_mitm.config.routes import ConfigError, routes_from_toml

from .helpers import ANTH, CHAT, feed, json_bytes, make_flow, respond, sse_bytes


def _route_file(tmp_path, line: str):
    p = tmp_path / "routes.toml"
    p.write_text(f'[[routes]]\nname = "qwen"\n{line}\ntarget = {{ protocol = "{ANTH}" }}\n'
                 f'[[routes]]\nname = "plain"\ntarget = {{ protocol = "{ANTH}" }}\n')
    return p


def test_routes_file_reads_the_option(tmp_path):
    qwen, plain = routes_from_toml(_route_file(tmp_path, "refusal_in_content = true"))
    assert qwen.refusal_in_content is True and plain.refusal_in_content is None
    qwen, _ = routes_from_toml(_route_file(tmp_path, "refusal_in_content = false"))
    assert qwen.refusal_in_content is False
    with pytest.raises(ConfigError, match=r"route 'qwen' \(routes\[0\]\): refusal_in_content"):
        routes_from_toml(_route_file(tmp_path, 'refusal_in_content = "sometimes"'))


def _chat_refusal(addon, *, stream: bool) -> dict | bytes:
    f = make_flow(CHAT, stream=stream)
    addon.request(f)
    if stream:
        respond(f, 200, None, "text/event-stream")
        addon.responseheaders(f)
        out = feed(f, sse_bytes(ANTH, "refusal"), step=40)
        addon.response(f)
        return out
    respond(f, 200, json_bytes(ANTH, "refusal"), "application/json")
    addon.responseheaders(f)
    addon.response(f)
    return json.loads(f.response.content)["choices"][0]["message"]


def _deltas(sse: bytes) -> list[dict]:
    return [json.loads(x[6:])["choices"][0]["delta"] for x in sse.decode().splitlines()
            if x.startswith("data: {") and json.loads(x[6:])["choices"]]


def test_off_by_default(addon):
    addon.configure(proxai_target=ANTH)
    msg = _chat_refusal(addon, stream=False)
    assert msg["content"] is None and msg["refusal"]
    assert not any(d.get("content") for d in _deltas(_chat_refusal(addon, stream=True)))


def test_global_option_puts_the_refusal_in_content(addon):
    addon.configure(proxai_target=ANTH, proxai_refusal_in_content=True)
    msg = _chat_refusal(addon, stream=False)
    assert msg["content"] == msg["refusal"] and msg["refusal"]
    deltas = [d for d in _deltas(_chat_refusal(addon, stream=True)) if d.get("refusal")]
    assert deltas and all(d["content"] == d["refusal"] for d in deltas)


def test_route_option_wins_over_the_global_one(addon, tmp_path):
    p = tmp_path / "routes.toml"
    p.write_text(f'[[routes]]\nname = "qwen"\nrefusal_in_content = true\nmatch = {{ model = "qwen*" }}\n'
                 f'target = {{ protocol = "{ANTH}" }}\n'
                 f'[[routes]]\nname = "off"\nrefusal_in_content = false\ntarget = {{ protocol = "{ANTH}" }}\n')
    addon.configure(proxai_config=str(p), proxai_refusal_in_content=True)
    f = make_flow(CHAT, body={"model": "qwen-coder", "messages": [{"role": "user", "content": "hi"}]})
    addon.request(f)
    respond(f, 200, json_bytes(ANTH, "refusal"), "application/json")
    addon.responseheaders(f)
    addon.response(f)
    msg = json.loads(f.response.content)["choices"][0]["message"]
    assert msg["content"] == msg["refusal"]
    assert _chat_refusal(addon, stream=False)["content"] is None  # route "off" (model gpt-4o)
