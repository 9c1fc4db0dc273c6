"""End to end, regular (forward) proxy mode with HTTPS interception: the SDK clients address the real
provider hosts through the proxy and trust the CA of a temporary mitmproxy confdir; routes retarget
the requests to the fake upstream (connection_strategy=lazy, set by the addon)."""

from __future__ import annotations

import json
import ssl
import time

import pytest

from tests.mitm_harness import Mitmdump, free_port

from .e2e_util import (
    CLIENT_KEY,
    DIRECTIONS,
    ENV_KEY,
    ENV_KEY_VALUE,
    SHORT,
    UPSTREAM_PATH,
    call,
    check,
    make_clients,
    serve,
    wait_flows,
    write_routes,
)

pytestmark = pytest.mark.e2e

SCENARIOS = ["text", "tool", "refusal"]


@pytest.fixture(scope="module")
def proxy(upstream, tmp_path_factory):
    routes = write_routes(tmp_path_factory.mktemp("routes"), upstream, free_port())
    m = Mitmdump(options={"proxai_config": str(routes)}, env={ENV_KEY: ENV_KEY_VALUE})
    m.start()
    yield m
    m.cleanup()


@pytest.fixture(scope="module")
def clients(proxy):
    assert proxy.ca_path.exists()
    return make_clients("https://api.openai.test", anthropic_base="https://api.anthropic.test",
                        proxy=proxy.url, verify=ssl.create_default_context(cafile=str(proxy.ca_path)))


def test_addon_switched_to_lazy_connections(proxy):
    proxy.wait_for_log(r"proxai: connection_strategy set to lazy")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("i, direction", list(enumerate(DIRECTIONS)))
def test_six_directions_https(proxy, up, clients, i, direction, stream):
    client, upstream_proto = direction
    scenario = SCENARIOS[(i + stream) % 3]
    serve(up, upstream_proto, scenario, delay=0.005)
    s = call(clients, client, f"to-{SHORT[upstream_proto]}-x", scenario, stream)
    check(s, client, scenario)
    rec = up.last(UPSTREAM_PATH[upstream_proto])
    assert rec.header("host") == f"127.0.0.1:{up.port}"
    assert CLIENT_KEY not in json.dumps(rec.headers)


def test_https_stream_is_live(proxy, up, clients):
    client, upstream_proto = DIRECTIONS[0]
    serve(up, upstream_proto, "text", delay=0.01, last_delay=1.0)
    first: list[float] = []
    call(clients, client, f"to-{SHORT[upstream_proto]}-x", "text", True, on_first=lambda: first.append(time.time()))
    assert first[0] < up.last(UPSTREAM_PATH[upstream_proto]).done_at - 0.7


def test_saved_https_flow(proxy, up, clients):
    n0 = len(proxy.flows())
    serve(up, "anthropic_messages", "tool")
    call(clients, "openai_responses", "to-anthropic-x", "tool", False)
    f = wait_flows(proxy, n0 + 1)[-1]
    m = f.metadata["proxai"]
    assert (m["client_protocol"], m["upstream_protocol"]) == ("openai_responses", "anthropic_messages")
    assert m["stop"]["reason"] == "tool_use"
    assert f.request.pretty_url == f"http://127.0.0.1:{up.port}/v1/messages"
    assert json.loads(m["client_request"])["input"]
