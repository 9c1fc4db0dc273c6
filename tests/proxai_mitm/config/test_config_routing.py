"""Options / routes file parsing, request recognition, upstream URL and header rewriting."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from mitmproxy import http

from proxai_core import Protocol
from proxai_mitm.config.routes import (
    ConfigError,
    parse_base_url,
    parse_model_map,
    routes_from_options,
    routes_from_toml,
)
from proxai_mitm.wire import routing


# ----------------------------------------------------------------------------- model map
def test_model_map_single_name_maps_everything():
    m = parse_model_map("claude-sonnet-4-5")
    assert m.map("gpt-5") == "claude-sonnet-4-5"
    assert m.map(None) == "claude-sonnet-4-5"


def test_model_map_globs_and_catch_all_last():
    m = parse_model_map("*=haiku, gpt-5*=sonnet, o3=opus")
    assert m.map("gpt-5-codex") == "sonnet"
    assert m.map("o3") == "opus"
    assert m.map("other") == "haiku"
    assert m.client_names() == ["o3"]
    assert parse_model_map("a=b").map("zzz") == "zzz"  # no match keeps the client's model


@pytest.mark.parametrize("bad", ["a,b", "a=b,c", "=b", "a="])
def test_model_map_errors(bad):
    with pytest.raises(ConfigError, match="proxai_model"):
        parse_model_map(bad, "proxai_model")


# ----------------------------------------------------------------------------- options
def test_options_empty_target_means_no_routes():
    assert not routes_from_options("", "https://x", "K", "m")


def test_options_make_default_route():
    rs = routes_from_options("anthropic_messages", "https://api.anthropic.com", "ANTHROPIC_API_KEY", "gpt-5*=claude")
    (r,) = rs.routes
    assert r.name == "default" and r.protocol is Protocol.ANTHROPIC
    assert str(r.base_url) == "https://api.anthropic.com"
    assert r.api_key_env == "ANTHROPIC_API_KEY"
    assert rs.retargets
    assert r.matches("any.host", "/v1/responses", "gpt-5")


@pytest.mark.parametrize(
    "args, name",
    [
        (("anthropic", "", "", ""), "proxai_target"),
        (("openai_responses", "ftp://x", "", ""), "proxai_upstream"),
        (("openai_responses", "https://user:pw@x", "", ""), "proxai_upstream"),
        (("openai_responses", "", "BAD-NAME", ""), "proxai_key_env"),
        (("openai_responses", "", "", "a=b,c"), "proxai_model"),
    ],
)
def test_options_errors_name_the_option(args, name):
    with pytest.raises(ConfigError) as e:
        routes_from_options(*args)
    assert str(e.value).startswith(name)


# ----------------------------------------------------------------------------- routes file
ROUTES = """
[[routes]]
name = "codex-on-claude"
match = { host = "api.openai.com", path = "/v1/responses", model = "gpt-5*" }
[routes.target]
protocol = "anthropic_messages"
base_url = "https://api.anthropic.com"
api_key_env = "ANTHROPIC_API_KEY"
model = "claude-sonnet-4-5"

[[routes]]
name = "claude-code-on-openai"
match = { path = "*/messages" }
target = { protocol = "openai_responses", model = { "claude-*" = "gpt-5", "*" = "gpt-5-mini" } }
"""


def test_routes_file_first_match_wins(tmp_path):
    p = tmp_path / "routes.toml"
    p.write_text(ROUTES)
    rs = routes_from_toml(p)
    assert [r.name for r in rs] == ["codex-on-claude", "claude-code-on-openai"]
    assert rs.find("api.openai.com", "/v1/responses", "gpt-5-codex").name == "codex-on-claude"
    assert rs.find("api.openai.com", "/v1/responses", "o3") is None  # model glob does not match
    assert rs.find("API.OPENAI.COM", "/v1/responses", "gpt-5").name == "codex-on-claude"
    r = rs.find("api.anthropic.com", "/v1/messages", "claude-opus-4")
    assert r.name == "claude-code-on-openai" and r.models.map("claude-opus-4") == "gpt-5"
    assert r.models.map("x") == "gpt-5-mini"


@pytest.mark.parametrize(
    "text, expect",
    [
        ('[[routes]]\nname="a"\ntarget={protocol="chat"}\n', "route 'a' (routes[0]): target.protocol: must be one of"),
        ('[[routes]]\nname="a"\n', "route 'a' (routes[0]): target: required field missing"),
        ('[[routes]]\nname="a"\ntarget={protocol="openai_responses", base_url="nope"}\n', "target.base_url"),
        ('[[routes]]\nname="a"\ntarget={protocol="openai_responses", api_key_env="1X"}\n', "target.api_key_env"),
        ('[[routes]]\nname="a"\nmatch={hots="x"}\ntarget={protocol="openai_responses"}\n',
         "match.hots: unknown field"),
        ('[[routes]]\nname="a"\ntarget={protocol="openai_responses", model="a=b,c"}\n', "target.model"),
        ('[[routes]]\ntarget={protocol="openai_responses"}\n', "routes[0]: name: required field missing"),
        (('[[routes]]\nname="a"\ntarget={protocol="openai_responses"}\n[[routes]]\nname="a"\n'
          'target={protocol="openai_responses"}\n'), "route 'a' (routes[1]): name: duplicate"),
        ("routes = 3\n", "no routes"),
        ("[[routes]\n", "invalid TOML"),
        ('[[routes]]\nname="a"\ntarget={protocol="openai_responses",\n model="x"}\n', "on one line"),
        ('other = 1\n[[routes]]\nname="a"\ntarget={protocol="openai_responses"}\n', "unknown top-level"),
    ],
)
def test_routes_file_errors_name_route_and_field(tmp_path, text, expect):
    p = tmp_path / "r.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        routes_from_toml(p)
    assert str(e.value).startswith("proxai_config: ")
    assert expect in str(e.value)


def test_routes_file_missing(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        routes_from_toml(tmp_path / "nope.toml")


# ----------------------------------------------------------------------------- recognition
@pytest.mark.parametrize(
    "method, path, kind, proto, prefix",
    [
        ("POST", "/v1/chat/completions", "generate", Protocol.CHAT, "/v1"),
        ("POST", "/api/v1/chat/completions", "generate", Protocol.CHAT, "/api/v1"),
        ("POST", "/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21", "generate", Protocol.CHAT,
         "/openai/deployments/gpt4o"),
        ("POST", "/v1/responses", "generate", Protocol.RESPONSES, "/v1"),
        ("POST", "/backend-api/codex/responses", "generate", Protocol.RESPONSES, "/backend-api/codex"),
        ("POST", "/v1/messages?beta=true", "generate", Protocol.ANTHROPIC, "/v1"),
        ("POST", "/v1/messages/count_tokens", "count_tokens", Protocol.ANTHROPIC, "/v1"),
        ("GET", "/v1/models", "models", None, "/v1"),
        ("GET", "/v1/models/gpt-5", "model", None, "/v1"),
    ],
)
def test_recognize(method, path, kind, proto, prefix):
    ep = routing.recognize(method, path, {})
    assert ep is not None and (ep.kind, ep.protocol, ep.prefix) == (kind, proto, prefix)


@pytest.mark.parametrize("method, path", [("GET", "/v1/responses"), ("POST", "/v1/embeddings"),
                                          ("GET", "/"), ("POST", "/v1/responses/abc/cancel"),
                                          ("DELETE", "/v1/models/x")])
def test_not_recognized(method, path):
    assert routing.recognize(method, path, {}) is None


def test_websocket_upgrade_recognized():
    ep = routing.recognize("GET", "/v1/responses", {"upgrade": "websocket"})
    assert ep.websocket and ep.protocol is Protocol.RESPONSES


def test_sniff_protocol():
    assert routing.body_protocol({"model": "x", "input": "hi"}) is Protocol.RESPONSES
    assert routing.body_protocol({"messages": [{"role": "system", "content": "x"}]}) is Protocol.CHAT
    assert routing.body_protocol({"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]}) is Protocol.ANTHROPIC
    assert routing.body_protocol({"messages": [{"role": "user", "content": "hi"}]}) is None


# ----------------------------------------------------------------------------- upstream URL
@pytest.mark.parametrize(
    "base, client_path, target, expect",
    [
        (None, "/v1/responses", Protocol.ANTHROPIC, ("http", "h", 80, "/v1/messages")),
        (None, "/api/v1/chat/completions", Protocol.ANTHROPIC, ("http", "h", 80, "/api/v1/messages")),
        ("https://api.anthropic.com", "/v1/responses", Protocol.ANTHROPIC,
         ("https", "api.anthropic.com", 443, "/v1/messages")),
        ("https://openrouter.ai/api/v1", "/v1/messages", Protocol.CHAT,
         ("https", "openrouter.ai", 443, "/api/v1/chat/completions")),
        ("https://openrouter.ai/api", "/v1/responses", Protocol.ANTHROPIC,
         ("https", "openrouter.ai", 443, "/api/v1/messages")),
        ("https://x.openai.azure.com/openai/deployments/d1?api-version=2024-10-21", "/v1/messages", Protocol.CHAT,
         ("https", "x.openai.azure.com", 443, "/openai/deployments/d1/chat/completions?api-version=2024-10-21")),
        ("https://chatgpt.com/backend-api/codex/responses", "/v1/messages", Protocol.RESPONSES,
         ("https", "chatgpt.com", 443, "/backend-api/codex/responses")),
        ("http://127.0.0.1:9000/", "/v1/messages", Protocol.RESPONSES, ("http", "127.0.0.1", 9000, "/v1/responses")),
    ],
)
def test_upstream_target(base, client_path, target, expect):
    ep = routing.recognize("POST", client_path, {})
    b = parse_base_url(base) if base else None
    assert routing.upstream_target(ep, target, b, scheme="http", host="h", port=80) == expect


def test_upstream_target_aux_endpoints():
    b = parse_base_url("https://api.anthropic.com")
    ep = routing.recognize("GET", "/v1/models/gpt-5", {})
    assert routing.upstream_target(ep, Protocol.ANTHROPIC, b, scheme="http", host="h", port=80,
                                   model_id="claude-x")[3] == "/v1/models/claude-x"
    ep = routing.recognize("POST", "/v1/messages/count_tokens", {})
    assert routing.upstream_target(ep, Protocol.ANTHROPIC, b, scheme="http", host="h", port=80)[3] == \
        "/v1/messages/count_tokens"


# ----------------------------------------------------------------------------- headers
def _headers(**kw):
    return http.Headers([(k.replace("_", "-").encode(), v.encode()) for k, v in kw.items()])


def test_headers_openai_client_to_anthropic_same_host():
    h = _headers(authorization="Bearer sk-client", openai_beta="responses=experimental",
                 openai_organization="org-1", accept_encoding="gzip, br, zstd", content_encoding="zstd")
    routing.rewrite_headers(h, client=Protocol.RESPONSES, target=Protocol.ANTHROPIC, same_host=True,
                            key="sk-client", upstream_host="api.anthropic.com")
    assert h["x-api-key"] == "sk-client" and "authorization" not in h
    assert h["anthropic-version"] == "2023-06-01"
    assert "openai-beta" not in h and "openai-organization" not in h
    assert h["accept-encoding"] == "identity" and "content-encoding" not in h


def test_headers_anthropic_client_to_openai_other_host_drops_account_headers():
    h = _headers(x_api_key="sk-ant-client", anthropic_version="2023-06-01", anthropic_beta="x",
                 cookie="session=1")
    routing.rewrite_headers(h, client=Protocol.ANTHROPIC, target=Protocol.CHAT, same_host=False,
                            key="sk-env", upstream_host="api.openai.com")
    assert h["authorization"] == "Bearer sk-env"
    for name in ("x-api-key", "anthropic-version", "anthropic-beta", "cookie"):
        assert name not in h


def test_headers_other_host_drops_a_non_ascii_header_name():
    from mitmproxy.http import Headers

    h = Headers([(b"authorization", b"Bearer sk-client"), ("\u00c4-key".encode(), b"sk-gateway-secret"),
                 (b"X-Request-Id", b"r1")])
    routing.rewrite_headers(h, client=Protocol.CHAT, target=Protocol.ANTHROPIC, same_host=False,
                            key="sk-env", upstream_host="api.anthropic.com")
    assert [k for k, _ in h.fields] == [b"X-Request-Id", b"x-api-key", b"anthropic-version",
                                        b"accept-encoding", b"content-type"]


def test_headers_azure_uses_api_key():
    h = _headers(authorization="Bearer x")
    routing.rewrite_headers(h, client=Protocol.ANTHROPIC, target=Protocol.CHAT, same_host=False, key="k",
                            upstream_host="res.openai.azure.com")
    assert h["api-key"] == "k" and "authorization" not in h


def test_headers_anthropic_to_anthropic_keeps_beta():
    h = _headers(x_api_key="k", anthropic_beta="interleaved-thinking-2025-05-14")
    routing.rewrite_headers(h, client=Protocol.ANTHROPIC, target=Protocol.ANTHROPIC, same_host=True, key="k",
                            upstream_host="h")
    assert h["anthropic-beta"] == "interleaved-thinking-2025-05-14"


def test_client_credential():
    assert routing.client_credential({"authorization": "Bearer abc"}) == "abc"
    assert routing.client_credential({"x-api-key": "k"}) == "k"
    assert routing.client_credential({"api-key": "z"}) == "z"
    assert routing.client_credential({"authorization": "Basic abc"}) is None


# ----------------------------------------------------------------------------- Gemini: model and method in the URL
@pytest.mark.parametrize("base, stream, expect", [
    ("https://generativelanguage.googleapis.com", False,
     ("https", "generativelanguage.googleapis.com", 443, "/v1beta/models/gemini-x:generateContent")),
    ("https://generativelanguage.googleapis.com/v1beta", True,
     ("https", "generativelanguage.googleapis.com", 443, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse")),
    ("https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/publishers/google", True,
     ("https", "us-central1-aiplatform.googleapis.com", 443,
      "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-x:streamGenerateContent?alt=sse")),
])
def test_upstream_target_gemini_puts_the_model_in_the_url(base, stream, expect):
    ep = routing.recognize("POST", "/v1/messages", {})
    got = routing.upstream_target(ep, Protocol.GEMINI, parse_base_url(base), scheme="http", host="h", port=80,
                                  model_id="gemini-x", stream=stream)
    assert got == expect


def test_gemini_client_paths_and_the_key_query_parameter():
    ep = routing.recognize("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=AIzaSECRET", {})
    assert (ep.kind, ep.protocol, ep.model_id, ep.stream, ep.sse) == (
        "generate", Protocol.GEMINI, "gemini-2.5-flash", True, True)
    assert routing.client_credential({}, ep.query) == "AIzaSECRET"
    # same host, another protocol: the target's own path; the query (framing and key) is not carried over
    assert routing.upstream_target(ep, Protocol.ANTHROPIC, None, scheme="http", host="h", port=80)[3] == \
        "/v1/messages"
    # same host, same protocol, same model: the client's path, the key taken out
    assert routing.upstream_target(ep, Protocol.GEMINI, None, scheme="http", host="h", port=80)[3] == \
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    vertex = routing.recognize(
        "POST", "/v1/projects/p/locations/l/publishers/google/models/m1:generateContent", {})
    assert (vertex.protocol, vertex.model_id, vertex.stream) == (Protocol.GEMINI, "m1", False)
    count = routing.recognize("POST", "/v1beta/models/m1:countTokens", {})
    assert count.kind == "count_tokens"
    assert routing.upstream_target(count, Protocol.GEMINI, None, scheme="http", host="h", port=80)[3] == \
        "/v1beta/models/m1:countTokens"


def test_gemini_headers_toward_another_host():
    h = _headers(x_goog_api_key="AIzaCLIENT", x_goog_api_client="genai-py/1", anthropic_version="2023-06-01")
    routing.rewrite_headers(h, client=Protocol.GEMINI, target=Protocol.ANTHROPIC, same_host=False, key="sk-env",
                            upstream_host="api.anthropic.com")
    assert "x-goog-api-key" not in h and "x-goog-api-client" not in h and h["x-api-key"] == "sk-env"
    h = _headers(authorization="Bearer sk-client", openai_beta="x")
    routing.rewrite_headers(h, client=Protocol.CHAT, target=Protocol.GEMINI, same_host=False, key="AIzaENV",
                            upstream_host="generativelanguage.googleapis.com")
    assert h["x-goog-api-key"] == "AIzaENV" and "authorization" not in h and "openai-beta" not in h


def test_route_patterns_match_as_shell_globs():
    """Host patterns ignore case, path and model patterns do not; ``alt_paths`` stand in for the path."""
    from proxai_mitm.config.routes import Route

    r = Route("r", Protocol.ANTHROPIC, match_host="*.Example.COM", match_path="/v1/*", match_model="claude-?-*")
    assert r.matches("API.example.com", "/v1/messages", "claude-3-opus")
    assert not r.matches("example.org", "/v1/messages", "claude-3-opus")
    assert not r.matches("api.example.com", "/V1/messages", "claude-3-opus")
    assert not r.matches("api.example.com", "/v1/messages", "Claude-3-opus")
    assert not r.matches("api.example.com", "/v1/messages", None)  # a model condition needs a model
    assert r.matches("api.example.com", "/v1/models", None, alt_paths=("/x", "/v1/messages"))
    assert not r.matches("api.example.com", "/v1/models", None, alt_paths=("/x",))
    assert Route("p", Protocol.CHAT, match_path="/a[bc]/[!x]").matches("h", "/ab/y", None)


# ----------------------------------------------------------------------------- routes file: hostile paths
def _refused(path, match):
    start = time.monotonic()
    with pytest.raises(ConfigError, match=match) as e:
        routes_from_toml(path)
    assert time.monotonic() - start < 2  # never blocks, never reads without end
    assert str(e.value).startswith("proxai_config: ") and str(path) in str(e.value)


def test_routes_file_fifo_is_refused_without_opening(tmp_path):
    fifo = tmp_path / "routes.fifo"
    os.mkfifo(fifo)  # no writer: opening it for reading would block
    _refused(fifo, "is not a regular file")


def test_routes_file_device_and_directory_are_refused(tmp_path):
    _refused(Path("/dev/zero"), "is not a regular file")
    _refused(tmp_path, "is not a regular file")


def test_routes_file_size_is_capped(tmp_path):
    from proxai_mitm.config.routes import MAX_ROUTES_FILE

    p = tmp_path / "big.toml"
    with open(p, "wb") as f:
        f.truncate(MAX_ROUTES_FILE + 1)  # sparse: no disk used
    _refused(p, f"is larger than {MAX_ROUTES_FILE} bytes")
    p.write_bytes(b"# " + b"x" * (MAX_ROUTES_FILE - 200) + b'\n[[routes]]\nname = "a"\ntarget = { protocol = "openai_responses" }\n')
    assert [r.name for r in routes_from_toml(p)] == ["a"]  # up to the cap is fine


@pytest.mark.parametrize("levels", [20, 400, 5000])
def test_routes_file_nesting_depth_is_capped(tmp_path, levels):
    p = tmp_path / "deep.toml"
    p.write_text('[[routes]]\nname = "a"\ntarget = { protocol = "openai_responses" }\nmatch = { host = '
                 + "[" * levels + "]" * levels + " }\n")
    _refused(p, "nested more than 16 levels deep")
    p.write_text("x = " + "{ a = " * levels + "1" + " }" * levels + "\n")
    _refused(p, "nested more than 16 levels deep")
