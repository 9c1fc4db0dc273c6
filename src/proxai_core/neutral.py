"""The neutral model every codec decodes into and encodes from.

Plain slotted dataclasses: they are built once per message part or stream event on the hot path,
so they stay cheaper than pydantic objects. Wire validation happens in the codecs.

Conventions shared by all codecs (the contract between decoders and encoders):

* Tool-call ``arguments`` are always JSON *text* (Anthropic ``input`` objects are dumped).
* ``ToolCall.kind == "custom"`` is a Responses custom (grammar/free-text) tool call; its raw input
  text is in ``arguments`` unchanged (not JSON).
* ``Reasoning.opaque`` holds the provider payload needed for continuity, tagged with the protocol
  that issued it (see :mod:`proxai_core.reasoning`).
* Usage: ``input`` excludes cache reads and cache writes (Anthropic meaning); OpenAI totals are
  ``input + cache_read + cache_write``. ``reasoning`` is part of ``output``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal

from .stop import StopInfo

Role = Literal["system", "developer", "user", "assistant"]


# ----------------------------------------------------------------------------- parts
#: what a tool call is: a function (JSON arguments) or a custom tool (free text input)
ToolKind = Literal["function", "custom"]

# ``type`` is a class constant of each part (not a field): one string per class, not per object.


@dataclass(slots=True)
class Text:
    text: str
    #: Neutral citations: dicts with "type" ("url" | "char_location" | "page_location" |
    #: "content_block_location" | "search_result_location" | "file"), and where known "url", "title",
    #: "cited_text", "start", "end" (char offsets into text), "file_id", "filename", "raw" (the
    #: source protocol's own object, for same-protocol fidelity).
    citations: list[dict[str, Any]] | None = None
    #: Anthropic cache_control or similar hints, kept when the target has them.
    cache_control: dict[str, Any] | None = None
    type: ClassVar[Literal["text"]] = "text"


@dataclass(slots=True)
class Image:
    #: "base64" (media_type + data) | "url" (url; may be a data: URL) | "file" (file_id)
    source: Literal["base64", "url", "file"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    file_id: str | None = None
    detail: str | None = None
    cache_control: dict[str, Any] | None = None
    type: ClassVar[Literal["image"]] = "image"


@dataclass(slots=True)
class Document:
    #: "base64" (media_type + data) | "url" | "text" (plain text in data) | "file" (file_id)
    source: Literal["base64", "url", "text", "file"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    file_id: str | None = None
    filename: str | None = None
    title: str | None = None
    cache_control: dict[str, Any] | None = None
    type: ClassVar[Literal["document"]] = "document"


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str = ""
    kind: ToolKind = "function"
    #: Provider item id where it differs from the call id (Responses "fc_…").
    item_id: str | None = None
    type: ClassVar[Literal["tool_call"]] = "tool_call"


@dataclass(slots=True)
class ToolResult:
    call_id: str
    content: list[Text | Image | Document] = field(default_factory=list)
    is_error: bool | None = None
    kind: ToolKind = "function"
    cache_control: dict[str, Any] | None = None
    type: ClassVar[Literal["tool_result"]] = "tool_result"


@dataclass(slots=True)
class Reasoning:
    #: Visible reasoning text (thinking text, summary text, or reasoning_content).
    text: str = ""
    #: Responses summaries kept as separate strings when the source had several.
    summary: list[str] | None = None
    #: Continuity payload, tagged by issuer: {"protocol": "...", ...}. None when there is none.
    opaque: dict[str, Any] | None = None
    #: True for Anthropic redacted_thinking (text is empty; data in opaque).
    redacted: bool = False
    type: ClassVar[Literal["reasoning"]] = "reasoning"


@dataclass(slots=True)
class Refusal:
    text: str
    type: ClassVar[Literal["refusal"]] = "refusal"


@dataclass(slots=True)
class Opaque:
    """A part only its own protocol understands (server tool blocks, hosted tool items, ...).

    ``protocol`` names the issuer; ``raw`` is the wire object. Encoders of the same protocol emit
    ``raw`` unchanged; other encoders drop it with a warning naming ``label``.
    """

    protocol: str
    raw: dict[str, Any]
    label: str = ""
    type: ClassVar[Literal["opaque"]] = "opaque"


@dataclass(slots=True)
class WebSearchCall:
    """A search the provider ran itself (Anthropic ``server_tool_use`` web_search, Responses
    ``web_search_call``, one Gemini grounding query). Its results follow as WebSearchResults.

    ``opaque`` is {"protocol": issuer, "raw": the wire object}: only the issuer's encoders emit
    ``raw``; the others build their own form from the neutral fields."""

    id: str
    query: str | None = None
    #: "completed" | "in_progress" | "failed"
    status: str | None = None
    opaque: dict[str, Any] | None = None
    type: ClassVar[Literal["web_search_call"]] = "web_search_call"


@dataclass(slots=True)
class WebSearchResult:
    url: str
    title: str | None = None
    page_age: str | None = None


@dataclass(slots=True)
class WebSearchResults:
    """What a web search returned: pages, or an error code. ``opaque`` as in WebSearchCall (it keeps
    Anthropic's ``encrypted_content``, which only Anthropic can read back); raw None means the
    results are inside the issuer's call object (Responses ``action.sources``)."""

    call_id: str
    results: list[WebSearchResult] = field(default_factory=list)
    error: str | None = None
    opaque: dict[str, Any] | None = None
    type: ClassVar[Literal["web_search_results"]] = "web_search_results"


Part = Text | Image | Document | ToolCall | ToolResult | Reasoning | Refusal | Opaque | WebSearchCall | WebSearchResults


@dataclass(slots=True)
class Message:
    """A turn."""

    role: Role
    parts: list[Part] = field(default_factory=list)
    #: Chat "name" field and similar, kept when the target has it.
    name: str | None = None


# ----------------------------------------------------------------------------- request
@dataclass(slots=True)
class Tool:
    name: str
    description: str | None = None
    #: JSON Schema for function tools (kept as given).
    parameters: dict[str, Any] | None = None
    kind: Literal["function", "custom"] = "function"
    strict: bool | None = None
    #: Custom tool input format (Responses/Chat custom tools), e.g. {"type": "grammar", ...}.
    format: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None
    #: (namespace, name) of a tool flattened out of a Responses ``namespace`` tool (``name`` is then
    #: the flat name): how its calls are named back for the client
    namespace: tuple[str, str] | None = None


@dataclass(slots=True)
class WebSearchTool:
    """The provider-run web search tool, with the options some providers take.

    ``raw`` is the client's own tool object when its decoder also kept it in
    ``Request.extra["server_tools"]`` (its own encoder sends that one; others skip it by identity)."""

    max_uses: int | None = None
    allowed_domains: list[str] | None = None
    blocked_domains: list[str] | None = None
    #: approximate location: "city", "region", "country", "timezone"
    user_location: dict[str, str] | None = None
    #: Responses / Chat search_context_size: "low" | "medium" | "high"
    context_size: str | None = None
    raw: dict[str, Any] | None = None


#: "auto" | "none" | "required" | "tool" (one named tool) | "allowed" (subset, with mode)
ToolChoiceMode = Literal["auto", "none", "required", "tool", "allowed"]


@dataclass(slots=True)
class ToolChoice:
    mode: ToolChoiceMode = "auto"
    name: str | None = None
    #: For mode "allowed": tool names and whether one is required.
    allowed: list[str] | None = None
    allowed_required: bool = False
    kind: Literal["function", "custom"] = "function"


@dataclass(slots=True)
class ReasoningConfig:
    #: "none" | "minimal" | "low" | "medium" | "high" | "xhigh" | "max"
    effort: str | None = None
    #: Anthropic thinking budget (enabled thinking).
    budget_tokens: int | None = None
    #: True when thinking/reasoning was explicitly disabled.
    disabled: bool = False
    #: Anthropic adaptive thinking.
    adaptive: bool = False
    #: Responses summary wish: "auto" | "concise" | "detailed".
    summary: str | None = None


@dataclass(slots=True)
class OutputFormat:
    #: "text" | "json_object" | "json_schema"
    type: str = "text"
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool | None = None
    description: str | None = None


@dataclass(slots=True)
class Request:
    model: str | None = None
    #: System and developer instructions, in order. Messages with role system/developer inside the
    #: conversation stay in ``messages``.
    system: list[Text] = field(default_factory=list)
    #: Role of the top-level instructions: "system" or "developer" (Chat/Responses distinction).
    system_role: Literal["system", "developer"] = "system"
    messages: list[Message] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    tool_choice: ToolChoice | None = None
    #: the client asked for the provider's own web search
    web_search: WebSearchTool | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] | None = None
    seed: int | None = None
    reasoning: ReasoningConfig | None = None
    output_format: OutputFormat | None = None
    stream: bool = False
    include_usage: bool = False
    user: str | None = None
    metadata: dict[str, Any] | None = None
    #: Source-protocol extras the target may understand (service_tier, store, prompt_cache_key...).
    extra: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- response
@dataclass(slots=True)
class Usage:
    input: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    output: int | None = None
    reasoning: int | None = None

    @property
    def input_total(self) -> int | None:
        if self.input is None and self.cache_read is None and self.cache_write is None:
            return None
        return (self.input or 0) + (self.cache_read or 0) + (self.cache_write or 0)

    def merge(self, other: Usage | None) -> Usage:
        """Cumulative merge: known values in ``other`` replace ours (never added)."""
        if other is None:
            return self
        return Usage(
            input=other.input if other.input is not None else self.input,
            cache_read=other.cache_read if other.cache_read is not None else self.cache_read,
            cache_write=other.cache_write if other.cache_write is not None else self.cache_write,
            output=other.output if other.output is not None else self.output,
            reasoning=other.reasoning if other.reasoning is not None else self.reasoning,
        )

    def to_dict(self) -> dict[str, int | None]:
        return {
            "input": self.input,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "output": self.output,
            "reasoning": self.reasoning,
            "input_total": self.input_total,
        }


@dataclass(slots=True)
class Response:
    id: str | None = None
    model: str | None = None
    parts: list[Part] = field(default_factory=list)
    stop: StopInfo | None = None
    #: Anthropic stop_sequence when the source said which sequence matched.
    stop_sequence: str | None = None
    usage: Usage | None = None
    created: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class ErrorKind(StrEnum):
    """What went wrong, the same for every protocol. Each codec maps every kind to its own HTTP
    status and error body (a StrEnum: a kind compares equal to its plain string)."""

    INVALID_REQUEST = "invalid_request"
    AUTHENTICATION = "authentication"
    BILLING = "billing"
    PERMISSION = "permission"
    NOT_FOUND = "not_found"
    REQUEST_TOO_LARGE = "request_too_large"
    RATE_LIMIT = "rate_limit"
    API_ERROR = "api_error"
    TIMEOUT = "timeout"
    OVERLOADED = "overloaded"
    #: the upstream stream or turn ended before its terminal
    INTERRUPTED = "interrupted"


@dataclass(slots=True)
class Error:
    """A provider error in neutral form."""

    kind: ErrorKind
    message: str
    status: int | None = None
    code: str | None = None
    param: str | None = None
    raw: Any = None


# ----------------------------------------------------------------------------- stream events
@dataclass(slots=True)
class Start:
    """First event of every stream."""

    id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    created: int | None = None


@dataclass(slots=True)
class BlockStart:
    """A part begins. ``part`` carries the fixed fields: Text(""), Refusal(""), Reasoning(),
    ToolCall(id, name, "" , kind), or an Opaque, WebSearchCall or WebSearchResults part (complete,
    repeated final in BlockEnd)."""

    index: int
    part: Part


@dataclass(slots=True)
class Delta:
    """kind: "text" | "refusal" | "reasoning" | "summary" | "arguments" | "signature"."""

    index: int
    kind: str
    value: str


@dataclass(slots=True)
class BlockEnd:
    """A part ends. ``part`` is the final part when the decoder has it cheaply (e.g. from a
    ``.done`` event, or reasoning opaque payloads / citations); encoders must not rely on it for
    text they already received as deltas, but do use it for opaque payloads and late arguments."""

    index: int
    part: Part | None = None


@dataclass(slots=True)
class UsageEvent:
    usage: Usage


@dataclass(slots=True)
class Stop:
    """The model's terminal stop information (before End)."""

    stop: StopInfo
    stop_sequence: str | None = None


@dataclass(slots=True)
class End:
    """The upstream stream terminated properly (after Stop)."""


@dataclass(slots=True)
class ErrorEvent:
    """Terminal: an upstream error mid-stream or an interruption (EOF before the terminal)."""

    error: Error


Event = Start | BlockStart | Delta | BlockEnd | UsageEvent | Stop | End | ErrorEvent
