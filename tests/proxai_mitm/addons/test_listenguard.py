"""A key-injecting route on a proxy reachable from the network: loud warning at start, and LLM
requests from other machines refused natively unless proxai_allow_remote."""

from __future__ import annotations

import json
import logging

import pytest
from mitmproxy.addons.proxyauth import ProxyAuth
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.test import taddons, tflow

from proxai_mitm.addons.listenguard import ListenGuard, exposed_listen_hosts, is_loopback
from proxai_mitm.config.options import RouteOptions


def test_loopback_and_exposed_hosts():
    for h in ("127.0.0.1", "127.8.0.1", "::1", "localhost", "::ffff:127.0.0.1"):
        assert is_loopback(h), h
    for h in ("", "0.0.0.0", "::", "192.168.1.5", "example.com", None):
        assert not is_loopback(h), h
    assert exposed_listen_hosts(["regular"], "127.0.0.1") == []
    assert exposed_listen_hosts(["regular"], "") == ["0.0.0.0 / :: (all interfaces)"]
    assert exposed_listen_hosts(["reverse:http://x@192.168.1.5:8081"], "127.0.0.1") == ["192.168.1.5"]
    assert exposed_listen_hosts(["reverse:http://x@127.0.0.1:8081", "regular"], "10.0.0.2") == ["10.0.0.2"]


def _ctx(monkeypatch):
    monkeypatch.setenv("PROXAI_LG_KEY", "k-123456789")
    routes = RouteOptions()
    guard = ListenGuard(routes)
    return routes, guard, taddons.context(Proxyserver(), ProxyAuth(), routes, guard)


def _hook(addon, name, flow):
    """Call a hook the way mitmproxy does: a hook that is None is skipped."""
    fn = getattr(addon, name, None)
    if fn:
        fn(flow)


def _remote_flow():
    f = tflow.tflow()
    f.client_conn.peername = ("192.168.7.7", 50000)
    f.request.method = "POST"
    f.request.path = "/v1/messages"
    f.request.headers["anthropic-version"] = "2023-06-01"
    return f


@pytest.mark.parametrize("listen_host", ["", "0.0.0.0"])
def test_warns_and_refuses_remote_clients(monkeypatch, caplog, listen_host):
    routes, guard, context = _ctx(monkeypatch)
    caplog.set_level(logging.WARNING)
    with context as tctx:
        tctx.options.update(listen_host=listen_host, proxai_target="openai_chat_completions",
                            proxai_upstream="https://api.example.com", proxai_key_env="PROXAI_LG_KEY")
        assert "inject an API key and mitmproxy listens on" in caplog.text
        assert "--listen-host 127.0.0.1" in caplog.text
        f = _remote_flow()
        _hook(guard, "request", f)
        assert f.response is not None and f.response.status_code == 403
        body = json.loads(f.response.content)
        assert body["type"] == "error" and body["error"]["type"] == "permission_error"
        local = tflow.tflow()
        local.request.method, local.request.path = "POST", "/v1/chat/completions"
        local.client_conn.peername = ("127.0.0.1", 1)
        _hook(guard, "request", local)
        assert local.response is None


def test_quiet_when_safe(monkeypatch, caplog):
    routes, guard, context = _ctx(monkeypatch)
    caplog.set_level(logging.WARNING)
    with context as tctx:
        tctx.options.update(listen_host="127.0.0.1", proxai_target="openai_chat_completions",
                            proxai_upstream="https://api.example.com", proxai_key_env="PROXAI_LG_KEY")
        tctx.options.update(listen_host="0.0.0.0", proxyauth="user:pass")  # exposed but guarded
        assert "inject an API key" not in caplog.text
        f = _remote_flow()
        assert guard.request is None  # nothing to refuse: no per-flow hook at all
        _hook(guard, "request", f)
        assert f.response is None
        tctx.options.update(proxyauth="", proxai_allow_remote=True)  # exposed, allowed explicitly: warns, serves
        assert "proxai_allow_remote is set" in caplog.text
        _hook(guard, "request", f)
        assert f.response is None
        tctx.options.update(proxai_allow_remote=False)  # exposed, unguarded again: the hook is back
        _hook(guard, "request", f)
        assert f.response is not None and f.response.status_code == 403


def test_no_key_injected_no_warning(monkeypatch, caplog):
    routes, guard, context = _ctx(monkeypatch)
    caplog.set_level(logging.WARNING)
    with context as tctx:
        tctx.options.update(listen_host="", proxai_target="openai_chat_completions")
        assert "inject an API key" not in caplog.text and not guard.refuse


def test_proxyauth_any_guards_nothing(monkeypatch, caplog):
    """Issue 21 row 10: proxyauth=any accepts every user:password, so it counts as no proxyauth."""
    routes, guard, context = _ctx(monkeypatch)
    caplog.set_level(logging.WARNING)
    with context as tctx:
        tctx.options.update(listen_host="0.0.0.0", proxyauth="any", proxai_target="openai_chat_completions",
                            proxai_upstream="https://api.example.com", proxai_key_env="PROXAI_LG_KEY")
        assert "with proxyauth=any, which accepts any user:password" in caplog.text
        f = _remote_flow()
        _hook(guard, "request", f)
        assert f.response is not None and f.response.status_code == 403
        caplog.clear()
        tctx.options.update(proxyauth="user:secret")  # real credentials guard the port
        assert "inject an API key" not in caplog.text and guard.request is None


def test_web_host_beyond_loopback_warns(monkeypatch, caplog):
    """Issue 21 row 11: mitmweb shows the injected key in request headers to whoever opens its UI."""
    from mitmproxy.tools.web.webaddons import WebAddon

    monkeypatch.setenv("PROXAI_LG_KEY", "k-123456789")
    routes = RouteOptions()
    guard = ListenGuard(routes)
    caplog.set_level(logging.WARNING)
    with taddons.context(Proxyserver(), WebAddon(), routes, guard) as tctx:
        tctx.options.update(listen_host="127.0.0.1", proxai_target="openai_chat_completions",
                            proxai_upstream="https://api.example.com", proxai_key_env="PROXAI_LG_KEY")
        assert "mitmweb" not in caplog.text  # web_host defaults to 127.0.0.1
        for host, shown in (("0.0.0.0", "0.0.0.0"), ("", "all interfaces")):
            caplog.clear()
            tctx.options.update(web_host=host)
            assert f"mitmweb's UI listens on {shown} (web_host)" in caplog.text
            assert "--set web_host=127.0.0.1" in caplog.text
        caplog.clear()
        tctx.options.update(proxai_key_env="")  # no key injected: nothing to show
        assert "mitmweb" not in caplog.text
