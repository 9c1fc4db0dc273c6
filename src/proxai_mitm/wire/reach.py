"""Reach a flow's mitmproxy HTTP stream from an addon, in every proxy mode.

mitmproxy gives addons no handle on a flow's ``HttpStream`` (the per-request state machine of its HTTP
layer). ProxAI needs one to end a silent upstream (idle.py) and to answer a client whose upstream failed
(cutanswer.py). :func:`find` walks the layers of the client's connection handler to the stream; the
layers are nested differently per mode (reverse: one HTTP layer; regular mode: a CONNECT tunnel puts a
second HTTP layer inside the first; regular and upstream mode hand events on by replacing
``_handle_event``). :func:`deliver` and :func:`answer` send one injected message from the top: every
HTTP layer on the way routes it to the next stream (``connections[flow.server_conn]``, pointed there for
the call), a CONNECT stream hands it unchanged into its tunnel (it is no response event), and a relay
standing in for the flow's stream at the innermost layer turns it into what the stream or the client
must get. Checked against mitmproxy 12.3; when something is not where it should be, :func:`find`
returns None and the caller leaves the flow to mitmproxy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["Reach", "answer", "deliver", "find"]

#: layers visited at most while looking for a stream (a connection has a handful)
_MAX_LAYERS = 512


@dataclass
class Reach:
    """A flow's connection handler, its stream, and the (HttpLayer, HttpStream) pairs from the
    top of the layer stack down to that stream (one per HTTP layer on the way)."""

    handler: Any
    stream: Any
    pairs: list[tuple[Any, Any]]

    @property
    def state(self) -> str:
        """The name of the stream's server-side state (``state_wait_for_response_headers``, ...)."""
        return str(getattr(self.stream.server_state, "__name__", ""))

    @property
    def client_state(self) -> str:
        return str(getattr(self.stream.client_state, "__name__", ""))


def _children(layer: Any) -> list[Any]:
    from mitmproxy.proxy.layer import NextLayer
    from mitmproxy.proxy.layers.http import HttpLayer

    if isinstance(layer, NextLayer):
        return [layer.layer]
    if isinstance(layer, HttpLayer):
        return list(layer.streams.values())
    child = getattr(layer, "child_layer", None)
    if child is not None:
        return [child]
    # the regular and upstream proxy modes pass every event on by making the next layer's
    # handle_event their own _handle_event (they keep no child_layer)
    owner = getattr(getattr(layer, "_handle_event", None), "__self__", None)
    return [owner] if owner is not None and owner is not layer else []


def find(flow: Any) -> Reach | None:
    """The flow's live stream, or None (no handler, no stream, an unexpected layer stack)."""
    try:
        from mitmproxy import ctx
        from mitmproxy.proxy.layers.http import HttpStream

        handler = ctx.master.addons.get("proxyserver").connections.get(flow.client_conn.id)
        if handler is None:
            return None
        todo, seen = [handler.layer], 0
        while todo and seen < _MAX_LAYERS:
            layer = todo.pop()
            seen += 1
            if layer is None:
                continue
            if isinstance(layer, HttpStream) and getattr(layer, "flow", None) is flow:
                return _reach(handler, layer)
            todo.extend(_children(layer))
    except Exception:  # noqa: BLE001 - an incompatible mitmproxy: the caller falls back
        logger.debug("proxai: no stream for %s", getattr(flow, "id", "?"), exc_info=True)
    return None


def _reach(handler: Any, stream: Any) -> Reach | None:
    from mitmproxy.proxy.layers.http import HttpLayer, HttpStream

    # a stream's context lists the layers above it, top first (NextLayers leave themselves out)
    layers = stream.context.layers
    pairs: list[tuple[Any, Any]] = []
    for i, layer in enumerate(layers[:-1]):
        if isinstance(layer, HttpLayer):
            below = layers[i + 1]
            if not isinstance(below, HttpStream) or layer.streams.get(below.stream_id) is not below:
                return None
            pairs.append((layer, below))
    if not pairs or pairs[-1][1] is not stream:
        return None
    return Reach(handler, stream, pairs)


def _route_key() -> Any:
    from mitmproxy.connection import Server

    return Server(address=None)  # never equal to a real connection: a key of our own


class _Route:
    """The carrier's ``flow``: HttpLayer routes an injected message by ``connections[flow.server_conn]``."""

    __slots__ = ("client_conn", "server_conn")

    def __init__(self, client_conn: Any, key: Any) -> None:
        self.client_conn = client_conn
        self.server_conn = key


def _carrier(route: _Route) -> Any:
    from mitmproxy.proxy import events

    return events.MessageInjected(route, None)  # type: ignore[arg-type]


class _Relay:
    """Stands in for the flow's stream in its HTTP layer while the carrier passes: the carrier
    becomes ``produce()``; anything else (a hook's completion routed back to us) goes to the stream."""

    __slots__ = ("carrier", "produce", "stream")

    def __init__(self, stream: Any, carrier: Any, produce: Any) -> None:
        self.stream, self.carrier, self.produce = stream, carrier, produce

    def handle_event(self, event: Any) -> Iterator[Any]:
        if event is self.carrier:
            yield from self.produce()
        else:
            yield from self.stream.handle_event(event)


async def _send(reach: Reach, produce: Any) -> None:
    key = _route_key()
    carrier = _carrier(_Route(reach.stream.flow.client_conn, key))
    inner, stream = reach.pairs[-1]
    sid = stream.stream_id
    relay = _Relay(stream, carrier, produce)
    for http_layer, below in reach.pairs:
        http_layer.connections[key] = below
    inner.streams[sid] = relay
    try:
        await reach.handler.server_event(carrier)
    finally:
        for http_layer, _ in reach.pairs:
            http_layer.connections.pop(key, None)
        if inner.streams.get(sid) is relay:  # (dropped meanwhile: the stream is finished, leave it out)
            inner.streams[sid] = stream


async def deliver(reach: Reach, stream_events: list[Any]) -> None:
    """Hand ``stream_events`` (ResponseHeaders / ResponseData / ResponseEndOfMessage of the stream's
    id) to the stream as if they came from the upstream: mitmproxy runs its hooks and answers the
    client as usual."""
    stream = reach.stream

    def produce() -> Iterator[Any]:
        for ev in stream_events:
            yield from stream.handle_event(ev)

    await _send(reach, produce)


async def answer(reach: Reach, response: Any) -> None:
    """Send ``response`` (complete, with its body) to the client on the stream's id, without any
    hook and without the stream: for a stream mitmproxy is about to drop (see cutanswer.py)."""
    from mitmproxy.proxy.layers.http import ResponseData, ResponseEndOfMessage, ResponseHeaders, SendHttp

    stream = reach.stream
    sid, client = stream.stream_id, stream.context.client
    body = response.raw_content or b""

    def produce() -> Iterator[Any]:
        yield SendHttp(ResponseHeaders(sid, response, not body), client)
        if body:
            yield SendHttp(ResponseData(sid, body), client)
        yield SendHttp(ResponseEndOfMessage(sid), client)

    await _send(reach, produce)
