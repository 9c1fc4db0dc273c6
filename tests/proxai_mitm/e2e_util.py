"""Shared pieces of the end-to-end tests: routes, the reverse-mode proxy, SDK clients, result summaries."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from tests.fake_upstream import RECORDED, FakeUpstream, Reply
from tests.mitm_harness import Mitmdump

CHAT, RESP, ANTH = "openai_chat_completions", "openai_responses", "anthropic_messages"
PROTOCOLS = (CHAT, RESP, ANTH)
DIRECTIONS = [(c, u) for c in PROTOCOLS for u in PROTOCOLS if c != u]
UPSTREAM_PATH = {CHAT: "/v1/chat/completions", RESP: "/v1/responses", ANTH: "/v1/messages"}
UPSTREAM_MODEL = {CHAT: "gpt-4o", RESP: "gpt-5", ANTH: "claude-sonnet-4-5"}
SHORT = {CHAT: "chat", RESP: "responses", ANTH: "anthropic"}
ENV_KEY = "PROXAI_E2E_KEY"
ENV_KEY_VALUE = "sk-e2e-env-key-0123456789"
CLIENT_KEY = "sk-client-key-must-not-leak-42"
TOOLS_OPENAI_CHAT = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                                       "parameters": {"type": "object",
                                                                      "properties": {"city": {"type": "string"},
                                                                                     "unit": {"type": "string"}},
                                                                      "required": ["city"]}}}]
TOOLS_RESPONSES = [{"type": "function", "name": "get_weather", "description": "Weather",
                    "parameters": TOOLS_OPENAI_CHAT[0]["function"]["parameters"]}]
TOOLS_ANTHROPIC = [{"name": "get_weather", "description": "Weather",
                    "input_schema": TOOLS_OPENAI_CHAT[0]["function"]["parameters"]}]


def routes_toml(up: FakeUpstream, dead_port: int) -> str:
    """Client model name picks the route: ``to-<protocol>`` translates to that protocol on the fake
    upstream (as the same host in reverse mode), ``remote-*`` goes to ``localhost`` (another host)
    with a key from the environment, ``nokey-*`` to another host without one, ``dead-*`` nowhere."""
    base = up.url
    other = f"http://localhost:{up.port}"
    out = []
    for p in PROTOCOLS:
        out.append(f'[[routes]]\nname = "to-{SHORT[p]}"\nmatch = {{ model = "to-{SHORT[p]}*" }}\n'
                   f'target = {{ protocol = "{p}", base_url = "{base}", api_key_env = "{ENV_KEY}", '
                   f'model = "{UPSTREAM_MODEL[p]}" }}\n')
    out.append(f'[[routes]]\nname = "strict"\nmatch = {{ path = "/strict/*" }}\n'
               f'target = {{ protocol = "{CHAT}", base_url = "{base}", api_key_env = "{ENV_KEY}" }}\n')
    out.append(f'[[routes]]\nname = "remote"\nmatch = {{ model = "remote-*" }}\n'
               f'target = {{ protocol = "{ANTH}", base_url = "{other}", api_key_env = "{ENV_KEY}" }}\n')
    out.append(f'[[routes]]\nname = "nokey"\nmatch = {{ model = "nokey-*" }}\n'
               f'target = {{ protocol = "{ANTH}", base_url = "{other}" }}\n')
    out.append(f'[[routes]]\nname = "missing-env"\nmatch = {{ model = "missingenv-*" }}\n'
               f'target = {{ protocol = "{ANTH}", base_url = "{other}", api_key_env = "PROXAI_E2E_UNSET" }}\n')
    out.append(f'[[routes]]\nname = "dead"\nmatch = {{ model = "dead-*" }}\n'
               f'target = {{ protocol = "{CHAT}", base_url = "http://127.0.0.1:{dead_port}", '
               f'api_key_env = "{ENV_KEY}" }}\n')
    return "\n".join(out)


def write_routes(tmp: Path, up: FakeUpstream, dead_port: int) -> Path:
    p = tmp / "routes.toml"
    p.write_text(routes_toml(up, dead_port))
    return p


def route_toml(name: str, path: str, protocol: str, up: FakeUpstream) -> str:
    """One route: requests on ``path`` go to ``up`` in ``protocol`` (its model for that protocol), with
    the key from the environment."""
    return (f'[[routes]]\nname = "{name}"\nmatch = {{ path = "{path}" }}\n'
            f'target = {{ protocol = "{protocol}", base_url = "{up.url}", '
            f'api_key_env = "{ENV_KEY}", model = "{UPSTREAM_MODEL[protocol]}" }}\n')


def reverse_mitmdump(up: FakeUpstream, routes: str | None = None,
                     tmp_path_factory: pytest.TempPathFactory | None = None, *,
                     options: dict[str, str] | None = None) -> Mitmdump:
    """A mitmdump in reverse mode in front of ``up`` (``with`` starts it and cleans it up). Without
    ``routes`` or ``options`` it passes every request through; ``routes`` (a routes.toml's text) is
    written to a new directory of ``tmp_path_factory`` and loaded. With either, the proxy has the key
    of the environment variable ``ENV_KEY``."""
    opts = dict(options or {})
    if routes is not None:
        assert tmp_path_factory is not None, "routes need a tmp_path_factory to be written to"
        file = tmp_path_factory.mktemp("routes") / "routes.toml"
        file.write_text(routes)
        opts["proxai_config"] = str(file)
    return Mitmdump(mode=f"reverse:{up.url}", options=opts, env={ENV_KEY: ENV_KEY_VALUE} if opts else None)


# ----------------------------------------------------------------------------- clients
@dataclass
class Clients:
    chat: Any
    responses: Any
    anthropic: Any


def make_clients(base: str, *, proxy: str | None = None, verify: Any = True, api_key: str = CLIENT_KEY,
                 anthropic_base: str | None = None) -> Clients:
    hc = httpx2.Client(proxy=proxy, verify=verify, timeout=30) if proxy else None
    hc2 = httpx2.Client(proxy=proxy, verify=verify, timeout=30) if proxy else None
    oc = openai.OpenAI(base_url=base + "/v1", api_key=api_key, max_retries=0, http_client=hc, timeout=30)
    ac = anthropic.Anthropic(base_url=anthropic_base or base, api_key=api_key, max_retries=0, http_client=hc2,
                             timeout=30)
    return Clients(oc, oc, ac)


@dataclass
class Summary:
    text: str = ""
    refusal: bool = False
    tools: list[tuple[str, dict]] = field(default_factory=list)
    stop: str | None = None


def call(clients: Clients, client: str, model: str, scenario: str, stream: bool,
         on_first: Any = None) -> Summary:
    """One request through the SDK of ``client``; the SDK-parsed result summarized."""
    prompt = "What's the weather in Paris?"
    if client == CHAT:
        kw: dict = dict(model=model, messages=[{"role": "user", "content": prompt}])
        if scenario == "tool":
            kw["tools"] = TOOLS_OPENAI_CHAT
        if stream:
            with clients.chat.chat.completions.stream(**kw) as s:
                for ev in s:
                    if on_first and ev.type in ("content.delta", "refusal.delta",
                                                "tool_calls.function.arguments.delta"):
                        on_first()
                        on_first = None
                r = s.get_final_completion()
        else:
            r = clients.chat.chat.completions.create(**kw)
        msg = r.choices[0].message
        return Summary(msg.content or "", bool(msg.refusal),
                       [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls or []],
                       r.choices[0].finish_reason)
    if client == RESP:
        kw = dict(model=model, input=prompt)
        if scenario == "tool":
            kw["tools"] = TOOLS_RESPONSES
        if stream:
            with clients.responses.responses.stream(**kw) as s:
                for ev in s:
                    if on_first and ev.type in ("response.output_text.delta", "response.refusal.delta",
                                                "response.function_call_arguments.delta"):
                        on_first()
                        on_first = None
                r = s.get_final_response()
        else:
            r = clients.responses.responses.create(**kw)
        refusal = any(getattr(c, "type", None) == "refusal" for o in r.output if o.type == "message"
                      for c in o.content)
        tools = [(o.name, json.loads(o.arguments)) for o in r.output if o.type == "function_call"]
        return Summary(r.output_text, refusal, tools, r.status)
    kw = dict(model=model, max_tokens=256, messages=[{"role": "user", "content": prompt}])
    if scenario == "tool":
        kw["tools"] = TOOLS_ANTHROPIC
    if stream:
        with clients.anthropic.messages.stream(**kw) as s:
            for ev in s:
                if on_first and ev.type == "content_block_delta":
                    on_first()
                    on_first = None
            m = s.get_final_message()
    else:
        m = clients.anthropic.messages.create(**kw)
    text = "".join(b.text for b in m.content if b.type == "text")
    tools = [(b.name, b.input) for b in m.content if b.type == "tool_use"]
    return Summary(text, m.stop_reason == "refusal", tools, m.stop_reason)


EXPECT_STOP = {
    "text": {CHAT: "stop", RESP: "completed", ANTH: "end_turn"},
    "tool": {CHAT: "tool_calls", RESP: "completed", ANTH: "tool_use"},
}


def check(summary: Summary, client: str, scenario: str) -> None:
    if scenario == "text":
        assert summary.text == "Hello! The weather is sunny."
        assert not summary.refusal and not summary.tools
    elif scenario == "tool":
        assert summary.tools == [("get_weather", {"city": "Paris", "unit": "celsius"})]
    elif scenario == "refusal":
        assert summary.refusal, summary
        assert not summary.tools
    if scenario in EXPECT_STOP:
        assert summary.stop == EXPECT_STOP[scenario][client], summary


def serve(up: FakeUpstream, upstream: str, scenario: str, **stream_kw: Any) -> None:
    rec = RECORDED[upstream][scenario]
    path = UPSTREAM_PATH[upstream]
    up.on(path, Reply.json(rec["json"]), stream=False)
    up.on(path, Reply.sse(rec["sse"], **stream_kw), stream=True)


def wait_flows(m: Any, n: int, timeout: float = 5.0) -> list:
    end = time.monotonic() + timeout
    flows: list = []
    while time.monotonic() < end:
        flows = m.flows()
        if len(flows) >= n:
            return flows
        time.sleep(0.05)
    raise AssertionError(f"expected {n} saved flows, got {len(flows)}")
