"""A route that injects the user's API key must not serve it to the whole network.

mitmproxy listens on every interface unless told otherwise (``--listen-host``, or a mode spec's
``@host:port``). When a route injects an API key (``proxai_key_env`` / ``api_key_env``), a proxy
reachable from other machines without ``proxyauth`` (or with ``proxyauth=any``, which accepts every
user:password) lends that key to anyone who can connect. This addon says so loudly at start, and,
unless ``proxai_allow_remote`` is set, answers LLM requests from clients that are not on this
machine's loopback with a 403 in their own protocol instead of injecting the key.

mitmweb shows every flow's request headers, the injected key included, to whoever opens its UI: a
``web_host`` beyond loopback is warned about too.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

import orjson
from mitmproxy import ctx, http

from proxai_core.codecs import native_error
from proxai_core.neutral import Error, ErrorKind

from ..wire.protocols import DEFAULT_PROTOCOL, client_protocol_of_headers
from ..wire.routing import recognize

logger = logging.getLogger(__name__)

__all__ = ["ListenGuard", "exposed_listen_hosts", "is_loopback"]

_WATCHED = {"mode", "listen_host", "proxyauth", "proxai_allow_remote", "proxai_config", "proxai_key_env",
            "proxai_target", "proxai_upstream", "web_host"}


def is_loopback(host: str | None) -> bool:
    if not host:
        return False  # "" = every interface
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def exposed_listen_hosts(modes: Any, listen_host: str) -> list[str]:
    """The listen addresses of the configured modes that are not loopback ("" shown as all interfaces)."""
    from mitmproxy.proxy.mode_specs import ProxyMode

    out = []
    for spec in modes or ():
        try:
            mode = ProxyMode.parse(spec)
        except ValueError:
            continue
        if mode.listen_port(None) is None:
            continue  # local capture and friends listen nowhere
        host = mode.listen_host(listen_host or None)
        if not is_loopback(host):
            out.append(host or "0.0.0.0 / :: (all interfaces)")
    return out


class ListenGuard:
    def __init__(self, route_options: Any) -> None:
        self.route_options = route_options
        self.refuse = False

    def load(self, loader: Any) -> None:
        loader.add_option(
            "proxai_allow_remote", bool, False,
            "Serve LLM requests from other machines although a route injects an API key and mitmproxy "
            "listens beyond loopback without proxyauth. Off: such requests get a 403 in their protocol "
            "(and a warning is logged at start).",
        )

    def configure(self, updated: set[str]) -> None:
        if not updated & _WATCHED:
            return
        opts = ctx.options
        routes = getattr(getattr(self.route_options, "routes", None), "routes", ()) or ()
        injecting = [r.name for r in routes if getattr(r, "api_key_env", None) or getattr(r, "auth", None)]
        exposed = exposed_listen_hosts(getattr(opts, "mode", ()), getattr(opts, "listen_host", ""))
        auth = str(getattr(opts, "proxyauth", "") or "")
        guarded = bool(auth) and auth != "any"  # "any" accepts every user:password: it guards nothing
        allowed = bool(getattr(opts, "proxai_allow_remote", False))
        self.refuse = bool(injecting and exposed and not guarded and not allowed)
        # nothing to refuse: the hook is switched off (mitmproxy skips a hook that is None), so an
        # ordinary flow pays no dispatch for it
        if self.refuse:
            self.__dict__.pop("request", None)
        else:
            self.request = None  # type: ignore[assignment]
        names = ", ".join(repr(n) for n in injecting)
        if injecting and exposed and not guarded:
            logger.warning(
                "proxai: WARNING: route(s) %s inject an API key and mitmproxy listens on %s %s: "
                "anyone who can reach this port could use the key. Start with --listen-host 127.0.0.1 (or set "
                "proxyauth to real credentials). %s", names, ", ".join(exposed),
                "with proxyauth=any, which accepts any user:password" if auth else "without proxyauth",
                "proxai_allow_remote is set: remote clients are served." if allowed else
                "Until then LLM requests from other machines get 403 (proxai_allow_remote=true serves them).")
        web_host = getattr(opts, "web_host", None)  # declared by mitmweb only
        if injecting and web_host is not None and not is_loopback(web_host):
            logger.warning(
                "proxai: WARNING: route(s) %s inject an API key and mitmweb's UI listens on %s (web_host): "
                "whoever reaches it with its token or web_password sees the key in the request headers of "
                "every routed flow. Start with --set web_host=127.0.0.1.", names, web_host or "all interfaces")

    def request(self, flow: http.HTTPFlow) -> None:
        if not self.refuse or not flow.live or flow.response is not None:
            return
        peer = getattr(flow.client_conn, "peername", None)
        if peer and is_loopback(str(peer[0])):
            return
        ep = recognize(flow.request.method, flow.request.path, flow.request.headers)
        if ep is None:
            return
        proto = ep.protocol or client_protocol_of_headers(flow.request.headers) or DEFAULT_PROTOCOL
        status, body = native_error(Error(kind=ErrorKind.PERMISSION, status=403, message=(
            "proxai: this proxy injects an API key and refuses clients from other machines "
            "(listen on 127.0.0.1, set proxyauth, or proxai_allow_remote=true)")), proto)
        flow.response = http.Response.make(status, orjson.dumps(body), {"content-type": "application/json"})
