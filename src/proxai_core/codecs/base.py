"""The codec contract: one typed unit per protocol that owns every fact of that protocol.

A protocol is one :class:`Codec` instance, ``CODEC`` at the end of its module
(``codecs/<member name in lower case>.py``), found through the registry in
:mod:`proxai_core.codecs` (the :class:`~proxai_core.protocol.Protocol` enum is the registry's list).
Everything outside ``codecs/`` asks the registry; nothing outside branches on a protocol.

A codec has two faces: the translation face (the Codec's own members: bodies, streams, errors,
stops, sniffing) and the wire face (:class:`Wire`, ``codec.wire``: endpoints, request fields,
credentials and headers, the model list) that only a proxy needs.
``docs/dev/codec-contract.md`` describes every member.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from typing import Protocol as TypingProtocol

from ..caching import CacheHint
from ..context import ClientContext
from ..errors import client_status
from ..neutral import Error, ErrorKind, Event, Request, Response
from ..protocol import Protocol
from ..ratelimit import RetryAfter, reader
from ..sse import SSEEvent, SSEReader
from ..stop import StopKey, StopReason, WireStop

__all__ = [
    "JSONObject",
    "PathFacts",
    "SNIFF_CONTENT",
    "SNIFF_DECISIVE",
    "SNIFF_DEFAULT",
    "SNIFF_DIALECT",
    "SNIFF_HINT",
    "SNIFF_HOST",
    "SNIFF_KEYS",
    "SNIFF_TOOLS",
    "SNIFF_WEAK",
    "Capabilities",
    "Codec",
    "Credentials",
    "Endpoints",
    "ErrorFacts",
    "Evidence",
    "RequestFields",
    "StreamDecoder",
    "StreamEncoder",
    "StreamReader",
    "TokenCounter",
    "Wire",
]

#: A parsed JSON object (request/response bodies, error bodies): JSON values, read defensively.
JSONObject = dict[str, Any]

#: How strongly a body looks like a protocol: (strength, -position). Higher wins; the registry
#: compares the evidence of every codec (ties: registry order). None: no evidence.
Evidence = tuple[int, int]

# evidence strengths, strongest first (what each codec's sniffers return)
SNIFF_HOST = 110  #: a host's own mark on a body another protocol shares (an id only that host mints)
SNIFF_DECISIVE = 100  #: a field or value only this protocol has
SNIFF_DIALECT = 90  #: a provider dialect of this protocol (outranks shared-looking keys)
SNIFF_KEYS = 80  #: a top-level key typical of this protocol
SNIFF_CONTENT = 60  #: a message role or content block type (earlier position wins)
SNIFF_TOOLS = 20  #: the shape of the first tool
SNIFF_HINT = 10  #: a field this protocol requires and others merely allow
SNIFF_DEFAULT = 5  #: the protocol this shape is when nothing else says otherwise
SNIFF_WEAK = 1  #: any protocol of the vendor reads it the same


class StreamReader(TypingProtocol):
    """Upstream stream bytes -> events ``(event name or None, data text)`` (one instance per stream).
    :class:`proxai_core.sse.SSEReader` for SSE; a protocol with another framing gives its own."""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events the bytes read so far complete."""
        ...

    def close(self) -> list[SSEEvent]:
        """At end of stream: what is left (an event cut before its end is handed over as it is)."""
        ...

    def feed_raw(self, chunk: bytes) -> tuple[list[SSEEvent | None], list[bytes]]:
        """Pass-through: events (None where the bytes complete none) and, for each, the bytes to
        forward for it."""
        ...

    def close_raw(self) -> tuple[list[SSEEvent | None], list[bytes]]:
        """Pass-through at end of stream: :meth:`feed_raw` of what is left."""
        ...


class StreamDecoder(TypingProtocol):
    """Upstream SSE events of one protocol -> neutral events (one instance per stream)."""

    #: a terminal event (End or ErrorEvent) was produced
    done: bool

    def __init__(self, warnings: list[str]) -> None: ...

    def feed(self, event: str | None, data: str) -> list[Event]:
        """One SSE event (name or None, data text) -> neutral events. A malformed upstream event
        raises :class:`proxai_core.strict.MalformedEvent`; any other exception is a ProxAI bug."""
        ...

    def finish(self) -> list[Event]:
        """Upstream EOF: End if the terminal (or the stop information) was seen, else
        ErrorEvent(Error(kind=ErrorKind.INTERRUPTED)). Nothing after a terminal."""
        ...


class StreamEncoder(TypingProtocol):
    """Neutral events -> the client's SSE bytes in one protocol (one instance per stream)."""

    def __init__(self, ctx: ClientContext, warnings: list[str]) -> None: ...

    def encode(self, ev: Event) -> bytes:
        """May return b"". After End or ErrorEvent the client stream is complete."""
        ...


@dataclass(slots=True)
class PathFacts:
    """What a request path says where the protocol keeps the model and the method in the URL
    (Gemini: ``/v1beta/models/{model}:streamGenerateContent?alt=sse``)."""

    #: "generate" | "count_tokens"
    kind: str
    #: the path before the endpoint (the version, a Vertex project/location)
    prefix: str
    model: str
    stream: bool
    #: a stream is SSE (else the protocol's other framing, e.g. one JSON array)
    sse: bool = True


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where requests of this protocol go (paths after the version prefix, e.g. ``/v1``)."""

    #: the generation endpoint (POST), e.g. "/chat/completions"
    generate: str
    #: a token-counting endpoint (POST) with the generation body, or None
    count_tokens: str | None = None
    #: the model list (GET; one model is ``<models>/<id>``); vendors share it
    models: str = "/models"
    #: the generation endpoint is also served as a websocket (GET + ``Upgrade: websocket``)
    websocket: bool = False
    #: protocols that name the model and the method in the URL (None: fixed paths, facts in the
    #: body): a request path (query included) -> its facts, or None when it names no endpoint
    parse_path: Callable[[str], PathFacts | None] | None = None
    #: the same protocols: (model, stream) -> the upstream path after the version prefix
    path_for: Callable[[str, bool], str] | None = None
    #: the same protocols: model -> the upstream token-counting path after the version prefix
    count_path_for: Callable[[str], str] | None = None
    #: the version prefix a bare base URL gets (``https://host`` -> ``https://host/v1/...``)
    default_prefix: str = "/v1"


@dataclass(frozen=True, slots=True)
class RequestFields:
    """Where a request body keeps what a proxy reads before translating it."""

    model: str = "model"
    stream: str = "stream"
    #: stop sequences (a string or a list of strings)
    stop: str = "stop"
    #: the stream options object with ``include_usage`` (None: the protocol has none)
    stream_options: str | None = None
    #: other top-level fields that never change the answer (tracking, caching, storage hints):
    #: a replayed recording matches whatever they say
    volatile: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Credentials:
    """How this protocol's clients authenticate and which headers belong to its vendor."""

    #: headers that carry a key (read to find the client's key; removed before a key is injected)
    key_headers: tuple[str, ...]
    #: headers that identify the client's account: never sent to a host the client did not address
    account_headers: tuple[str, ...]
    #: headers only this vendor's APIs read (harmless to forward to any protocol of the vendor)
    vendor_headers: tuple[str, ...]
    #: headers only this protocol reads (dropped when the client's protocol is translated)
    protocol_headers: tuple[str, ...]
    #: headers whose presence identifies a client of this vendor (e.g. on a shared model list)
    client_markers: tuple[str, ...]
    #: headers added to an upstream request of this protocol when absent
    default_headers: Mapping[str, str]
    #: (key, upstream host) -> the headers that carry ``key`` to that host (the caller sets them)
    auth_headers: Callable[[str, str], dict[str, str]]
    #: the vendor these headers belong to ("openai", "anthropic"): shared headers, shared model list
    vendor: str
    #: URL query parameters that carry a key (Gemini ``key=``): moved, stripped and redacted like
    #: the key headers
    key_query: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ErrorFacts:
    """Error shapes of the protocol, both ways."""

    #: wire ``error.type`` -> kind (reading any upstream's error bodies)
    types: Mapping[str, ErrorKind]
    #: wire ``error.code`` -> kind, where a code is more precise than the type (or the status)
    codes: Mapping[str, ErrorKind]
    #: kind -> HTTP status this protocol's clients expect (every kind: the registry checks it)
    statuses: Mapping[ErrorKind, int]
    #: HTTP statuses this protocol's clients never see (e.g. 529 for OpenAI): the kind's status instead
    foreign_statuses: frozenset[int]
    #: the client's native error body
    body: Callable[[Error], JSONObject]
    #: a response header naming the error's type where the body does not (its value up to the
    #: first ":" is looked up in ``types``), e.g. ``x-amzn-errortype``
    type_header: str | None = None
    #: the response headers that go with :attr:`body` for this protocol's clients (e.g. the error
    #: type header); None: none
    headers: Callable[[Error], dict[str, str]] | None = None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the protocol can carry."""

    #: free-text ``custom`` tools exist (else they travel as functions with one ``input`` string)
    custom_tools: bool
    #: an interrupted upstream turn is a response status here (Responses ``failed``/``cancelled``),
    #: not an error that replaces the response
    interrupted_is_status: bool
    #: the client's SDK parses tool-call arguments at every streamed fragment (Anthropic): arguments
    #: that stop being one JSON object end the turn with an error event instead of being sent
    parses_streamed_arguments: bool = False
    #: a web search tool, its calls and results exist here (else dropped with a warning naming them)
    web_search: bool = True


@dataclass(frozen=True, slots=True)
class TokenCounter:
    """A protocol's token counting endpoint (``Endpoints.count_tokens``), both ways: a client's
    counting request is read as the generation request it describes, translated like one, and sent as
    the target's counting request; the target's answer is read back as a number of tokens."""

    #: (a generation body of this protocol, the model to count for) -> the counting request body
    request: Callable[[JSONObject, str | None], JSONObject]
    #: a counting request body of this protocol -> the generation body it describes (to decode)
    generation: Callable[[JSONObject], JSONObject]
    #: the counting endpoint's answer -> input tokens (None: not an answer of this protocol)
    tokens: Callable[[JSONObject], int | None]
    #: input tokens -> this protocol's answer (also the shape of a local estimate)
    answer: Callable[[int], JSONObject]


@dataclass(frozen=True, slots=True)
class Wire:
    """The wire face of a protocol: what a proxy needs around the translation (where requests go,
    what they are read for before translating, which headers carry keys and belong to the vendor,
    the answers it gives itself). The translator core reads only ``endpoints.parse_path`` and
    ``fields`` (to know a client's model and stream flag)."""

    endpoints: Endpoints
    fields: RequestFields
    credentials: Credentials
    #: one model entry of the model list (id, the upstream's entry or None)
    model_entry: Callable[[str, JSONObject | None], JSONObject]
    #: the model list body around entries
    model_list: Callable[[list[JSONObject]], JSONObject]
    #: protocols with a token counting endpoint: how its requests and answers read and translate
    counter: TokenCounter | None = None
    #: every stream of this protocol is SSE (False: a stream may come in the protocol's own
    #: framing, told by the body, not by the content type; :attr:`Codec.stream_reader` reads both)
    sse_only: bool = True
    #: the content type of a stream in the protocol's own framing where it has one of its own
    #: (Bedrock: ``application/vnd.amazon.eventstream``); None: JSON
    stream_type: str | None = None
    #: (response headers, parsed error body or None) -> seconds until the upstream's rate limit
    #: resets (bounded), or None when the answer gives no hint; made by
    #: :func:`proxai_core.ratelimit.reader` from the protocol's own hints
    retry_after: RetryAfter = reader()


@dataclass(slots=True, eq=False)
class Codec:
    """Everything ProxAI knows about one protocol. One instance per protocol (``CODEC``); never
    changed after import (tests may patch a member of it)."""

    protocol: Protocol
    #: short name ("chat"): tables, CLI, reports
    name: str
    #: human label ("OpenAI Chat Completions")
    label: str

    # --- behaviour: requests, responses, streams ------------------------------------------
    #: a client's request body -> neutral; invalid input raises TranslationError naming the field
    decode_request: Callable[[JSONObject, list[str]], Request]
    #: neutral -> an upstream request body of this protocol
    encode_request: Callable[[Request, list[str]], JSONObject]
    #: an upstream complete response -> neutral (StopInfo; failures in ``extra["error"]``)
    decode_response: Callable[[JSONObject, list[str]], Response]
    #: neutral -> the client's complete response
    encode_response: Callable[[Response, ClientContext, list[str]], JSONObject]
    StreamDecoder: Callable[[list[str]], StreamDecoder]
    StreamEncoder: Callable[[ClientContext, list[str]], StreamEncoder]
    #: the native mid-stream error frame(s) (also on the pass-through path)
    error_frame: Callable[[Error], bytes]

    # --- facts -------------------------------------------------------------------------------
    #: the wire face: endpoints, request fields, credentials and headers, the model list
    wire: Wire
    errors: ErrorFacts
    capabilities: Capabilities
    #: the client's tools from its request body

    #: neutral stop decision -> this protocol's stop value; every StopKey, no default
    stop_table: Mapping[StopKey, WireStop]
    #: stop values this protocol writes -> their reason (the vocabulary read back)
    stop_values: Mapping[str, StopReason]
    #: this protocol's response id for a source id (deterministic), minted when there is none
    response_id: Callable[[str | None], str]
    #: evidence that a request / complete response body / SSE head is in this protocol
    sniff_request: Callable[[JSONObject], Evidence | None]
    sniff_response: Callable[[JSONObject], Evidence | None]
    sniff_stream: Callable[[bytes], Evidence | None]
    #: an HTTP error body (not a model response) in this protocol
    is_error_body: Callable[[JSONObject], bool]
    #: the reader of this protocol's streams (a protocol with another framing than SSE gives its
    #: own, and says so in ``wire.sse_only``)
    stream_reader: Callable[[], StreamReader] = SSEReader
    #: a pass-through (same protocol) forwards every event's bytes and decodes only what it must
    #: observe: (event name, data) -> False when the event carries no start, stop, usage, error or
    #: terminal fact and the decoder needs no state from it (so it is forwarded undecoded, e.g.
    #: text deltas). None: every event is decoded. Cheap by design: a name lookup, a substring.
    stream_observes: Callable[[str | None, str], bool] | None = None
    #: prompt caching: adds this protocol's caching hints to an upstream body translated from another
    #: protocol, in place (Anthropic breakpoints, OpenAI's prompt_cache_key). None: the provider
    #: caches a stable prefix by itself (Gemini), which translation keeps stable.
    cache_hints: Callable[[JSONObject, CacheHint], None] | None = None

    def error_status(self, err: Error) -> int:
        """The HTTP status this protocol's clients expect for ``err`` (see errors.client_status)."""
        return client_status(err, self.errors.statuses, self.errors.foreign_statuses)

    def error_response(self, err: Error) -> tuple[int, JSONObject]:
        """(status, native body) of an error for this protocol's clients."""
        return self.error_status(err), self.errors.body(err)

    def __repr__(self) -> str:
        return f"<codec {self.name}>"
