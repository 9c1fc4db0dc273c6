"""google-genai as the judge of Gemini bodies, streams and requests (used by tests/sdk.py).

Real recordings go through the SDK's own response path (``_GenerateContentResponse_from_mldev`` then
``GenerateContentResponse._from_response``); bodies we produce are also validated strictly
(``model_validate`` of the camelCase wire form: the SDK models forbid unknown fields). Streams are
read chunk by chunk the way the SDK reads them and accumulated like its chat history does.
"""

from __future__ import annotations

import json
import re
from typing import Any

from google.genai import models as _gm
from google.genai import types as gt

from proxai_core.codecs._gemini_common import REFUSAL_FINISHES, JsonArrayReader

#: stop values of a Gemini client that the summaries compare
_SSE_SPLIT = re.compile(rb"\r?\n\r?\n")


def sdk_response(body: dict[str, Any]) -> gt.GenerateContentResponse:
    """The SDK's own path from a wire body to its type (lenient about fields newer than the SDK)."""
    return gt.GenerateContentResponse._from_response(
        response=_gm._GenerateContentResponse_from_mldev(body), kwargs={})


def validate_response(body: dict[str, Any], *, strict: bool = True) -> gt.GenerateContentResponse:
    """Every field we produce must be one the SDK knows (its models forbid extras)."""
    if strict:
        gt.GenerateContentResponse.model_validate(body)
    return sdk_response(body)


def chunks_of_stream(data: bytes) -> list[dict[str, Any]]:
    """The chunks of a Gemini stream body in either framing (SSE ``data:`` lines or a JSON array)."""
    head = data.lstrip()[:1]
    if head == b"[":
        r = JsonArrayReader()
        els = r.feed_bytes(data, True)
        assert r.closed, "JSON-array stream without its closing bracket"
        return [json.loads(e) for e in els]
    out = []
    for block in _SSE_SPLIT.split(data):
        block = block.strip()
        if not block:
            continue
        assert block.startswith(b"data: "), f"Gemini SSE frames are single data: lines, got {block[:40]!r}"
        assert b"\n" not in block, "Gemini SSE frames are single lines"
        out.append(json.loads(block[6:]))
    return out


class GeminiStreamError(Exception):
    pass


def accumulate(chunks: list[dict[str, Any]], *, strict: bool = True) -> dict[str, Any]:
    """A complete response built from stream chunks (each validated by the SDK): text parts of the
    same kind are joined, other parts kept, the last finishReason / usage win."""
    parts: list[dict[str, Any]] = []
    finish = message = None
    usage = None
    feedback = None
    model = rid = None
    citations: list[Any] = []
    for c in chunks:
        if "error" in c and not c.get("candidates"):
            raise GeminiStreamError(c["error"].get("message"))
        r = validate_response(c, strict=strict)
        model = r.model_version or model
        rid = r.response_id or rid
        if r.usage_metadata is not None:
            usage = c.get("usageMetadata")
        if r.prompt_feedback is not None and c.get("promptFeedback"):
            feedback = c["promptFeedback"]
        for cand in c.get("candidates") or ():
            for p in (cand.get("content") or {}).get("parts") or ():
                if (parts and "text" in p and "text" in parts[-1] and bool(p.get("thought")) ==
                        bool(parts[-1].get("thought")) and "thoughtSignature" not in p
                        and "thoughtSignature" not in parts[-1]):
                    parts[-1] = dict(parts[-1], text=parts[-1]["text"] + p["text"])
                else:
                    parts.append(dict(p))
            if cand.get("finishReason"):
                finish = cand["finishReason"]
                message = cand.get("finishMessage")
            if cand.get("citationMetadata"):
                citations.extend(cand["citationMetadata"].get("citations") or ())
    body: dict[str, Any] = {}
    if finish is not None or parts:
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            cand["finishReason"] = finish
        if message:
            cand["finishMessage"] = message
        body["candidates"] = [cand]
    if feedback:
        body["promptFeedback"] = feedback
    if usage:
        body["usageMetadata"] = usage
    if model:
        body["modelVersion"] = model
    if rid:
        body["responseId"] = rid
    if strict:
        assert finish is not None or feedback is not None, "Gemini stream without a finishReason"
    return body


def summarize(body: dict[str, Any], summary: Any) -> Any:
    """Fill a tests.sdk.Summary from a Gemini body (validated by the SDK on the way)."""
    s = summary
    if "error" in body and not body.get("candidates"):
        s.error = body["error"].get("message")
        return s
    r = sdk_response(body)
    s.model = r.model_version
    cand = r.candidates[0] if r.candidates else None
    if cand is not None and cand.content is not None:
        ran = _server_run(cand.content.parts or [])
        for p in cand.content.parts or ():
            if id(p) in ran:
                continue
            if p.thought:
                s.reasoning = True
            elif p.text is not None:
                s.text += p.text
            elif p.function_call is not None:
                s.tool_calls.append((p.function_call.name, p.function_call.args or {}))
            elif p.thought_signature is not None:
                s.reasoning = True
            if p.thought_signature is not None:
                s.reasoning = True
    if cand is not None and cand.finish_reason is not None:
        s.stop = cand.finish_reason.value
        if s.stop in REFUSAL_FINISHES:  # Gemini has no refusal slot: the finishMessage says why
            # (the SDK keeps finishMessage on Vertex only)
            s.refusal = cand.finish_message or body["candidates"][0].get("finishMessage") or None
    elif r.prompt_feedback is not None and r.prompt_feedback.block_reason is not None:
        s.stop = "block:" + r.prompt_feedback.block_reason.value
        s.refusal = r.prompt_feedback.block_reason_message or None
    if r.usage_metadata is not None:
        u = r.usage_metadata
        s.usage = {"input": (u.prompt_token_count or 0) + (u.tool_use_prompt_token_count or 0),
                   "output": (u.candidates_token_count or 0) + (u.thoughts_token_count or 0)}
    return s


def _server_run(parts: list[Any]) -> set[int]:
    """Function calls (and their responses) Google ran itself inside the response."""
    out: set[int] = set()
    for k, p in enumerate(parts):
        if p.function_response is None:
            continue
        out.add(id(p))
        for c in parts[:k]:
            if c.function_call is not None and c.function_call.name == p.function_response.name \
                    and id(c) not in out:
                out.add(id(c))
                break
    return out


_REQ_MODEL: Any = None


def validate_request(body: dict[str, Any]) -> None:
    """A ``generateContent`` body with the SDK's types for each field; unknown fields are errors
    (a pydantic ValidationError, like the other SDKs' request validation)."""
    global _REQ_MODEL
    import pydantic

    if _REQ_MODEL is None:
        _REQ_MODEL = pydantic.create_model(
            "GenerateContentBody", __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True),
            contents=(list[gt.Content], ...),
            systemInstruction=(gt.Content | None, None),
            tools=(list[gt.Tool] | None, None),
            toolConfig=(gt.ToolConfig | None, None),
            generationConfig=(gt.GenerationConfig | None, None),
            safetySettings=(list[gt.SafetySetting] | None, None),
            cachedContent=(str | None, None),
            labels=(dict[str, str] | None, None),
        )
    _REQ_MODEL.model_validate(body)
