"""The contract every protocol codec module (``chat``, ``responses``, ``anthropic``) implements.

Each module exposes::

    def decode_request(body: dict, warnings: list[str]) -> neutral.Request
        # A client's request body -> neutral. Invalid client input raises TranslationError whose
        # message names the field (e.g. "messages[2].content[0].type: unknown part type 'x'").
        # Envelopes of ours (proxai_core.reasoning) in echoed fields are unpacked here.

    def encode_request(req: neutral.Request, warnings: list[str]) -> dict
        # neutral -> an upstream request body in this protocol. Features the protocol cannot carry
        # without changing the answer raise TranslationError; allowed lossy changes add a warning.
        # Tool names pass through context.short_tool_name(); custom tools become functions with a
        # single string parameter "input" when this protocol has no custom tools.

    def decode_response(body: dict, warnings: list[str]) -> neutral.Response
        # An upstream complete response -> neutral, with StopInfo (stop.py classify_stop + the seed
        # rules). Upstream failure bodies (Responses status "failed") set
        # resp.extra["error"] = neutral.Error(...).

    def encode_response(resp: neutral.Response, ctx: ClientContext, warnings: list[str]) -> dict
        # neutral -> the client's complete response in this protocol. Ids minted in this
        # protocol's style, model = ctx.model or resp.model. Seed refusal/stop rules live here.

    class StreamDecoder:
        def __init__(self, warnings: list[str]): ...
        def feed(self, event: str | None, data: str) -> list[neutral.Event]
            # one SSE event (name or None, data text) -> neutral events
        def finish(self) -> list[neutral.Event]
            # upstream EOF: End if the terminal (or the stop information) was seen, else
            # ErrorEvent(Error(kind="interrupted", ...)). Nothing after a terminal.
        done: bool  # a terminal event (End or ErrorEvent) was produced

    class StreamEncoder:
        def __init__(self, ctx: ClientContext, warnings: list[str]): ...
        def encode(self, ev: neutral.Event) -> bytes
            # neutral event -> SSE bytes for the client (may be b""). After End or ErrorEvent the
            # client stream is complete (its terminal frame, or its native error frame).
"""

# Also, each module exposes:
#
#     def error_frame(err: neutral.Error) -> bytes
#         # this protocol's native SSE error frame(s) for a mid-stream failure (used by the
#         # pass-through path too). Anthropic: "event: error" {"type":"error","error":{type,message}};
#         # Responses: an "error" event with both flat and nested fields; Chat: data: {"error":{...}}.
