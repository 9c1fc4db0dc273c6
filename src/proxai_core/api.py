"""Public entry points of the translator core, for library users: each is one
:class:`~proxai_core.exchange.Exchange` step (the proxy uses the exchange itself)."""

from __future__ import annotations

from typing import Any

from . import neutral as n
from .codecs import get, native_error, translation_error_response
from .codecs.base import Codec
from .complete import ResponseResult, collect_result, complete_result, error_stop_info, stream_result
from .context import ClientContext
from .errors import parse_error
from .exchange import Exchange
from .protocol import Protocol, as_protocol
from .stop import StopInfo, classify_stop
from .streams import StreamTranslator, stop_of_error

__all__ = [
    "ResponseResult",
    "StreamTranslator",
    "build_context",
    "decode_request",
    "decode_response",
    "error_response",
    "error_stop_info",
    "response_from_stream",
    "stop_info",
    "stop_of_error",
    "stream_from_response",
    "translate_error",
    "translate_request",
    "translate_response",
    "translate_response_result",
]


# ----------------------------------------------------------------------------- requests
def translate_request(
    body: dict[str, Any],
    source: Protocol | str,
    target: Protocol | str,
    *,
    warnings: list[str] | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    """A client request in ``source`` becomes the upstream request in ``target``. ``path``: the
    client's request path, where ``source`` keeps the model and the stream flag in the URL (the
    upstream path of such a target comes from its ``endpoints.path_for``)."""
    if as_protocol(source) is as_protocol(target):
        return body
    return Exchange(source, body, path=path, warnings=warnings).request_for(target)


def build_context(request: dict[str, Any] | None, protocol: Protocol | str,
                  path: str | None = None) -> ClientContext:
    """What the client's encoders need to know about its request (model to echo, tool names to
    restore, stream flags, stop sequences); ``path`` where the protocol keeps the model in the URL."""
    return Exchange(protocol, request, path=path).context


def decode_request(body: dict[str, Any], protocol: Protocol | str,
                   warnings: list[str] | None = None, *, path: str | None = None) -> n.Request:
    """Validate and read a client request into the neutral model (for views and reports)."""
    return Exchange(protocol, body, path=path, warnings=warnings).request


# ----------------------------------------------------------------------------- responses
def _context(request: dict[str, Any] | None, target: Codec, path: str | None,
             refusal_in_content: bool) -> ClientContext:
    """The client's context from its request body (decoded once by an exchange)."""
    return Exchange(target.protocol, request, path=path, refusal_in_content=refusal_in_content).context


def translate_response_result(
    body: dict[str, Any],
    source: Protocol | str,
    target: Protocol | str,
    request: dict[str, Any] | None = None,
    *,
    status: int = 200,
    path: str | None = None,
    refusal_in_content: bool = False,
) -> ResponseResult:
    """An upstream complete response in ``source`` becomes the client's in ``target``, with its status,
    StopInfo and usage. ``request``: the client's original request (model to echo, tool names to
    restore); ``path``: the client's request path (model and stream framing of URL-keyed protocols);
    ``refusal_in_content``: a Chat client also gets a refusal's text in ``content``."""
    src, tgt = get(as_protocol(source)), get(as_protocol(target))
    ctx = None if src is tgt else _context(request, tgt, path, refusal_in_content)
    return complete_result(body, src, tgt, ctx, status=status)


def translate_response(
    body: dict[str, Any],
    source: Protocol | str,
    target: Protocol | str,
    request: dict[str, Any] | None = None,
    *,
    warnings: list[str] | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    """An upstream complete response in ``source`` becomes the client's response in ``target``.

    ``request`` is the client's original request (model name to echo, tool names to restore).
    An upstream failure body (Responses ``status: failed``) becomes the client's native error body;
    use :func:`translate_response_result` to also get the status.
    """
    res = translate_response_result(body, source, target, request, path=path)
    if warnings is not None:
        warnings.extend(res.warnings)
    return res.body


def stream_from_response(body: dict[str, Any], source: Protocol | str, target: Protocol | str,
                         request: dict[str, Any] | None = None, *, path: str | None = None,
                         refusal_in_content: bool = False) -> tuple[bytes, StopInfo, list[str]]:
    """The client asked to stream but the upstream answered with complete JSON: a correct stream."""
    src, tgt = get(as_protocol(source)), get(as_protocol(target))
    out, res = stream_result(body, src, tgt, _context(request, tgt, path, refusal_in_content))
    return out, res.stop, res.warnings


def response_from_stream(sse: bytes, source: Protocol | str, target: Protocol | str,
                         request: dict[str, Any] | None = None, *, path: str | None = None,
                         refusal_in_content: bool = False) -> ResponseResult:
    """The client did not stream but the upstream did: collect it into a complete response."""
    src, tgt = get(as_protocol(source)), get(as_protocol(target))
    return collect_result(sse, src, tgt, _context(request, tgt, path, refusal_in_content))


def decode_response(body: dict[str, Any], protocol: Protocol | str,
                    warnings: list[str] | None = None) -> n.Response:
    return get(as_protocol(protocol)).decode_response(body, warnings if warnings is not None else [])


def stop_info(body: dict[str, Any], protocol: Protocol | str) -> StopInfo:
    """Classify a complete response."""
    resp = get(as_protocol(protocol)).decode_response(body, [])
    return resp.stop or classify_stop(None)

# ----------------------------------------------------------------------------- errors
def translate_error(
    status: int, body: bytes | str | dict[str, Any] | None, source: Protocol | str, target: Protocol | str
) -> tuple[int, dict[str, Any]]:
    """An upstream HTTP error (any JSON shape, or HTML / text / empty) becomes the client
    protocol's native error body and the right status."""
    as_protocol(source)
    err = parse_error(status, body)
    return native_error(err, as_protocol(target))


def error_response(exc: Exception, target: Protocol | str) -> tuple[int, dict[str, Any]]:
    """A TranslationError (or malformed client input) as the client's native 400."""
    return translation_error_response(exc, as_protocol(target))


