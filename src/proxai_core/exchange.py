"""One exchange, one object: a client request and the upstream's answer to it, sans I/O.

In the spirit of h11's ``Connection``: an :class:`Exchange` is made from what the client sent (its
protocol, path and body) and is then told what happens — never does I/O itself:

1. :meth:`Exchange.request_for` gives the upstream request for a target protocol; the client's body is
   decoded once (:attr:`Exchange.request`) and the client's context is built once from that decoded
   request (:attr:`Exchange.context`).
2. :meth:`Exchange.respond` is told the upstream's status and content type and decides what the
   response gets (:class:`Plan`).
3. A streamed response is fed chunk by chunk (:meth:`feed` -> the client's bytes, :meth:`close`,
   :meth:`abort`); a complete body is given whole (:meth:`complete` -> :class:`Outcome`).

It holds every observation in one place: the plan that ran, stop, usage, model, error, warnings,
the first-content mark (time to first token) and, when asked, the neutral response. The same object in
observe mode serves pass-through flows, flows read from a file, the report and the views.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from . import neutral as n
from .caching import CacheHint, conversation_key
from .client import context_of_body, context_of_request
from .codecs import get, native_error
from .codecs.base import Codec
from .collect import Collector
from .complete import (
    ResponseResult,
    collect_result,
    complete_result,
    error_stop_info,
    stop_of_http_error,
    stream_result,
)
from .context import ClientContext
from .errors import TranslationError, parse_error
from .jsonutil import dumps
from .protocol import Protocol, as_protocol
from .stop import StopInfo
from .streams import StreamTranslator

__all__ = ["JSON_TYPE", "SSE_TYPE", "Exchange", "Outcome", "Plan"]

SSE_TYPE = "text/event-stream; charset=utf-8"
JSON_TYPE = "application/json"


class Plan(StrEnum):
    """What translation a response gets (stored in the flow record as ``translation``)."""

    #: not a generation: left untouched
    NONE = "none"
    #: passed through unchanged, observed (StopInfo, usage)
    OBSERVE = "observe"
    #: answered by the proxy itself (replay hit, local count, refusal of a bad request)
    SYNTHETIC = "synthetic"
    #: a model list answered in the client's shape
    MODELS = "models"
    #: an upstream error: the client's native error (or passed through when nothing is translated)
    ERROR = "error"
    #: a stream translated event by event
    STREAM = "stream"
    #: a stream that arrived whole (e.g. empty): translated at once, with an honest ending
    STREAM_WHOLE = "stream_whole"
    #: an upstream stream collected into the complete response the client asked for
    COLLECT = "collect"
    #: a complete upstream response streamed to a client that asked for a stream
    TO_STREAM = "to_stream"
    #: a complete response translated
    JSON = "json"
    #: a token count answered by the target's counter, given in the client's shape
    COUNT = "count"


@dataclass(slots=True)
class Outcome:
    """What the client gets for a complete upstream body: ``body`` None keeps the upstream's."""

    status: int
    body: bytes | None = None
    content_type: str | None = None


def _streamed(upstream: Codec, content_type: str, client_stream: bool) -> bool:
    """A stream on the wire: SSE, or a streamed request whose protocol has its own stream framing."""
    return "text/event-stream" in content_type.lower() or (client_stream and not upstream.wire.sse_only)


#: what a decoder or encoder raises on a request shape its checks did not foresee
_UNFORESEEN = (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError)


class Exchange:
    """One client request and the upstream's answer (see the module docstring).

    ``client``: the client's protocol; ``body``: its request body (decoded only when a translation
    needs it); ``path``: its request path (where a protocol keeps the model and the stream flag);
    ``stream``: the client asked for a stream (None: read from the body / path when needed);
    ``warnings``: the list observations are appended to (the caller's, or a new one);
    ``kind``: ``generate``, or ``count_tokens`` (a counting request, read as the generation request
    it describes and answered by the target's counter).
    """

    def __init__(self, client: Protocol | str, body: dict[str, Any] | None = None, *, path: str | None = None,
                 stream: bool | None = None, refusal_in_content: bool = False,
                 warnings: list[str] | None = None, keep_response: bool = False,
                 kind: str = "generate") -> None:
        self.client: Codec = get(as_protocol(client))
        self.body = body
        self.kind = kind
        if kind == "count_tokens":
            stream = False
        self.path = path
        self.refusal_in_content = refusal_in_content
        self.warnings: list[str] = warnings if warnings is not None else []
        self._stream_flag = stream
        self._request: n.Request | None = None
        self._request_error: TranslationError | None = None
        self._context: ClientContext | None = None
        self._cache_key: str | None = None
        # the response side
        self.upstream: Codec | None = None
        self.plan: Plan | None = None
        self.status: int | None = None
        self.headers: Mapping[str, str] | None = None
        self.routed = True
        self.content_type = ""
        # what a complete body said (a stream's observations are its translator's: see the properties)
        self._stop: StopInfo | None = None
        self._usage: n.Usage | None = None
        self._model: str | None = None
        self._error: n.Error | None = None
        #: a count's input tokens, as the upstream's counter answered
        self.tokens: int | None = None
        #: the neutral response, kept when ``keep_response`` (views, reports)
        self.response: n.Response | None = None
        self._keep_response = keep_response
        self._collector: Collector | None = None
        self._stream: StreamTranslator | None = None

    # ------------------------------------------------------------------ the request
    @property
    def stream(self) -> bool:
        """The client asked for a stream (its body's flag, or its path's)."""
        if self._stream_flag is None:
            self._stream_flag = context_of_body(self.body, self.client, self.path).stream
        return self._stream_flag

    @property
    def request(self) -> n.Request:
        """The client's request, decoded once. Raises TranslationError for a request no decoder reads."""
        if self._request is None:
            if self._request_error is not None:
                raise self._request_error
            if not isinstance(self.body, dict):
                raise TranslationError("request body must be a JSON object", field="body")
            try:
                req = self.client.decode_request(self._generation_body(self.body), self.warnings)
            except TranslationError as exc:
                self._request_error = exc
                raise
            except _UNFORESEEN as exc:
                self._request_error = self._malformed(exc)
                raise self._request_error from exc
            parse = self.client.wire.endpoints.parse_path
            facts = parse(self.path) if self.path is not None and parse is not None else None
            if facts is not None:  # the model and stream flag this protocol keeps in the URL
                req.model = req.model or facts.model
                req.stream = facts.stream
            self._request = req
        return self._request

    def _generation_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The generation request a body describes (a counting request's, for a count)."""
        if self.kind != "count_tokens":
            return body
        counter = self.client.wire.counter
        if counter is None:
            raise TranslationError(f"{self.client.protocol.value} has no token counting endpoint", field="body")
        return counter.generation(body)

    @property
    def context(self) -> ClientContext:
        """What the client's encoders need, built once from the decoded request (a request that does
        not decode, e.g. a recording's, gives the facts of its fields and path only)."""
        if self._context is None:
            try:
                ctx = context_of_request(self.request, self.client, self.path)
            except TranslationError:  # a request no decoder reads (e.g. a recording's)
                ctx = context_of_body(self.body, self.client, self.path)
            if self.refusal_in_content:
                ctx.refusal_in_content = True
            self._context = ctx
        return self._context

    def request_for(self, target: Protocol | str, model: str | None = None) -> dict[str, Any]:
        """The upstream request body in ``target`` (the client's own body when the protocols agree).
        A count's is the target's counting request for ``model`` (default: the client's).
        Raises TranslationError naming the field of a request the client's decoder rejects."""
        tgt = get(as_protocol(target))
        if tgt is self.client:
            if not isinstance(self.body, dict):
                raise TranslationError("request body must be a JSON object", field="body")
            return self.body
        req = self.request
        counter = tgt.wire.counter
        if self.kind == "count_tokens" and counter is None:
            raise TranslationError(f"{tgt.protocol.value} has no token counting endpoint", field="body")
        try:
            body = tgt.encode_request(req, self.warnings)
        except TranslationError:
            raise
        except _UNFORESEEN as exc:
            raise self._malformed(exc) from exc
        if self.kind == "count_tokens":
            assert counter is not None
            return counter.request(body, model or req.model)
        return body

    @property
    def cache_key(self) -> str:
        """The conversation's caching key (set it to the session's own id when the client sent one)."""
        if self._cache_key is None:
            self._cache_key = conversation_key(self.request)
        return self._cache_key

    @cache_key.setter
    def cache_key(self, value: str) -> None:
        self._cache_key = value

    def add_cache_hints(self, target: Protocol | str, body: dict[str, Any], *, model: str | None = None,
                        host: str | None = None, explicit: bool = False) -> None:
        """The target's prompt-caching hints in a translated upstream body (in place): the client's own
        hints meant nothing to another provider (see :mod:`proxai_core.caching`). A body in the
        client's own protocol is left as the client sent it."""
        tgt = get(as_protocol(target))
        if tgt is self.client or tgt.cache_hints is None or self.kind != "generate":
            return
        tgt.cache_hints(body, CacheHint(key=self.cache_key, model=model, host=host, explicit=explicit))

    def _malformed(self, exc: Exception) -> TranslationError:
        """A request shape the codec's checks did not foresee: still the client's mistake, named as such."""
        return TranslationError(f"body: malformed {self.client.protocol.value} request "
                                f"({type(exc).__name__}: {exc})", field="body")

    @property
    def client_content_type(self) -> str:
        """The content type of the client's stream: SSE, or its protocol's JSON framing."""
        return SSE_TYPE if self.context.sse else JSON_TYPE + "; charset=utf-8"

    # ------------------------------------------------------------------ the response
    def respond(self, upstream: Protocol | str, status: int = 200, content_type: str = "", *,
                headers: Mapping[str, str] | None = None, routed: bool = True,
                whole: bool = False, reframe: bool = False) -> Plan:
        """The upstream answered ``status`` with ``content_type``: what the client's response gets.
        ``routed``: False for a flow passed through untouched (its errors are never rewritten);
        ``whole``: the body is known to be complete already (``content-length: 0``); ``reframe``: the
        client gets the framing it asked for even from its own protocol (a stream collected, a
        complete answer streamed: a replay server serving a recording of the other kind)."""
        up = self.upstream = get(as_protocol(upstream))
        self.status, self.headers, self.routed = status, headers, routed
        self.content_type = content_type
        same = up is self.client
        streamed = _streamed(up, content_type, self.stream)
        if status >= 400:
            plan = Plan.ERROR
        elif self.kind == "count_tokens":
            plan = Plan.OBSERVE if same else Plan.COUNT
        elif streamed and status < 300:
            if same and not (reframe and not self.stream):
                plan = Plan.OBSERVE
            elif not self.stream:
                plan = Plan.COLLECT
            else:
                plan = Plan.STREAM_WHOLE if whole else Plan.STREAM
        elif streamed:
            plan = Plan.OBSERVE if same or not routed else Plan.COLLECT
        elif same and not (reframe and self.stream):
            plan = Plan.OBSERVE
        else:
            plan = Plan.TO_STREAM if self.stream else Plan.JSON
        self.plan = plan
        if streamed and status < 300 and plan in (Plan.STREAM, Plan.OBSERVE):
            self._stream = self._stream_translator(up)
        return plan

    @property
    def streaming(self) -> bool:
        """The response is fed chunk by chunk (:meth:`feed`)."""
        return self._stream is not None

    def _stream_translator(self, up: Codec) -> StreamTranslator:
        if self._keep_response:
            self._collector = Collector()
        same = up is self.client
        return StreamTranslator(up.protocol, self.client.protocol, context=None if same else self.context,
                                collector=self._collector, warnings=self.warnings)

    def feed(self, chunk: bytes) -> bytes:
        """Upstream stream bytes -> what the client gets now (possibly ``b""``)."""
        assert self._stream is not None, "feed() needs a streamed plan"
        return self._stream.feed(chunk)

    def close(self) -> bytes:
        """The upstream's end of stream: the rest of the client's stream (an honest ending)."""
        assert self._stream is not None, "close() needs a streamed plan"
        out = self._stream.close()
        self._collected()
        return out

    def abort(self, reason: str = "stream interrupted") -> bytes:
        """The upstream connection failed: the client's native error frame; StopInfo interrupted."""
        assert self._stream is not None, "abort() needs a streamed plan"
        out = self._stream.abort(reason)
        self._collected()
        return out

    @property
    def finished(self) -> bool:
        """The upstream stream's terminal event (or an error) was seen."""
        return self._stream is not None and self._stream.finished

    @property
    def first_content(self) -> int | None:
        """Upstream bytes fed when the first content event was decoded (None: not yet, or no stream)."""
        return self._stream.first_content if self._stream is not None else None

    @property
    def events(self) -> int:
        """Upstream stream events read so far."""
        return self._stream.events if self._stream is not None else 0

    # observations: a stream's are its translator's, as they stand; a complete body's what it said
    @property
    def stop(self) -> StopInfo | None:
        return self._stream.stop if self._stream is not None else self._stop

    @property
    def usage(self) -> n.Usage | None:
        return self._stream.usage if self._stream is not None else self._usage

    @property
    def model(self) -> str | None:
        """The model the upstream named."""
        return self._stream.model if self._stream is not None else self._model

    @property
    def error(self) -> n.Error | None:
        return self._stream.error if self._stream is not None else self._error

    def _collected(self) -> None:
        """At the end of a stream: the neutral response it accumulated, when one is kept."""
        if self._collector is not None:
            self.response = self._collector.finish()

    def _whole_stream(self, up: Codec, body: bytes) -> bytes:
        """A stream that arrived as one body, fed at once: what the client gets."""
        self._stream = self._stream_translator(up)
        return self.feed(body) + self.close()

    def complete(self, body: bytes) -> Outcome:
        """A complete upstream body (the plan decided by :meth:`respond`) -> what the client gets."""
        plan, up = self.plan, self.upstream
        assert plan is not None and up is not None, "complete() needs respond() first"
        status = self.status or 200
        if plan is Plan.ERROR:
            return self._error_body(body, status)
        if plan is Plan.OBSERVE:
            if self.kind == "generate":
                self._observe_body(body)
            elif up.wire.counter is not None:
                obj = _json_object(body)
                self.tokens = up.wire.counter.tokens(obj) if isinstance(obj, dict) else None
            return Outcome(status)
        if plan is Plan.COUNT:
            return self._count(body, up, status)
        if plan in (Plan.STREAM_WHOLE, Plan.STREAM):  # a stream that arrived whole: translated at once
            return Outcome(200, self._whole_stream(up, body), self.client_content_type)
        if plan is Plan.COLLECT:
            res = collect_result(body, up, self.client, self.context)
            self._take(res)
            return Outcome(res.status, dumps(res.body), JSON_TYPE)
        obj = _json_object(body)
        if isinstance(obj, str):
            self.warnings.append(f"upstream answered 2xx with {obj}")
            st, native = native_error(n.Error(kind=n.ErrorKind.API_ERROR, status=502,
                                              message=f"upstream answered with {obj}"), self.client.protocol)
            self._stop = error_stop_info(st, native)
            self.plan = Plan.ERROR
            return Outcome(st, orjson.dumps(native), JSON_TYPE)
        if plan is Plan.TO_STREAM:
            out, res = stream_result(obj, up, self.client, self.context)
            self._take(res)
            return Outcome(200, out, self.client_content_type)
        res = complete_result(obj, up, self.client, self.context, status=status)
        self._take(res)
        return Outcome(res.status, dumps(res.body), JSON_TYPE)

    def _count(self, body: bytes, up: Codec, status: int) -> Outcome:
        """The target's count answer in the client's shape (an unreadable one: the client's 502)."""
        obj = _json_object(body)
        tokens = up.wire.counter.tokens(obj) if up.wire.counter is not None and isinstance(obj, dict) else None
        counter = self.client.wire.counter
        if tokens is None or counter is None:
            what = obj if isinstance(obj, str) else "no token count"
            self.warnings.append(f"upstream count answered {what}")
            err = n.Error(kind=n.ErrorKind.API_ERROR, status=502, message=f"upstream count answered with {what}")
            st, native = native_error(err, self.client.protocol)
            self._error, self._stop = err, error_stop_info(st, native)
            self.plan = Plan.ERROR
            return Outcome(st, orjson.dumps(native), JSON_TYPE)
        self.tokens = tokens
        return Outcome(status, orjson.dumps(counter.answer(tokens)), JSON_TYPE)

    def _take(self, res: ResponseResult) -> None:
        self._stop, self._usage, self._error, self._model = res.stop, res.usage, res.error, res.model
        self.warnings.extend(res.warnings)
        if self._keep_response:
            self.response = res.response

    def _error_body(self, body: bytes, status: int) -> Outcome:
        up = self.upstream
        assert up is not None
        err = self._error = parse_error(status, body)
        self._stop = stop_of_http_error(err, status, self.headers)
        if self.routed and (up is not self.client or not _is_json(body)):
            st, native = native_error(err, self.client.protocol)
            return Outcome(st, orjson.dumps(native), JSON_TYPE)
        self.plan = Plan.OBSERVE
        return Outcome(status)

    def _observe_body(self, body: bytes) -> None:
        """StopInfo, usage and model of an untouched complete body: a JSON response, or a whole stream
        (SSE, or a stream framed as one JSON array: the codec's reader tells them apart)."""
        up = self.upstream
        assert up is not None
        if "text/event-stream" in self.content_type.lower() or (self.stream and body.lstrip()[:1] == b"["):
            self._whole_stream(up, body)
            return
        obj = _json_object(body)
        if isinstance(obj, str):
            self.warnings.append(f"upstream answered 2xx with {obj}")
            return
        self._take(complete_result(obj, up, up, None))


def _is_json(body: bytes) -> bool:
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return True


def _json_object(body: bytes) -> dict[str, Any] | str:
    """``body`` as a JSON object, or why it is not one."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "a body that is not JSON"
    return obj if isinstance(obj, dict) else "JSON that is not an object"

