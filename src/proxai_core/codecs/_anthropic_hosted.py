"""What Claude hosted by a cloud (Vertex AI, Amazon Bedrock InvokeModel) changes in an Anthropic
Messages body: the request names its API version in the body (``anthropic_version``), keeps the
model in the URL and, on Bedrock, the stream flag too. The Anthropic codec does the message work;
these helpers adapt the body around it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..neutral import Request
from . import _anthropic_request as _request
from ._anthropic_common import warn_once

#: body fields of a hosted request that the Anthropic Messages API has no equivalent of
HOSTED_FIELDS = ("anthropic_version", "anthropic_beta")


def decode_hosted_request(body: dict[str, Any], warnings: list[str]) -> Request:
    """A hosted request body -> neutral, read by the Anthropic decoder without the hosted fields
    (the model and the stream flag come from the URL, set by the caller from the path's facts)."""
    if not isinstance(body, dict) or not any(k in body for k in HOSTED_FIELDS):
        return _request.decode_request(body, warnings)
    if body.get("anthropic_beta"):
        warn_once(warnings, "anthropic_beta flags in the body are not carried to another protocol")
    return _request.decode_request({k: v for k, v in body.items() if k not in HOSTED_FIELDS}, warnings)


def encode_hosted_request(req: Request, version: str, warnings: list[str], *, stream_in_body: bool) -> dict[str, Any]:
    """Neutral -> a hosted request body: ``anthropic_version`` first, no ``model`` (it is in the
    URL), the stream flag only where the host reads it from the body."""
    # (a model of "" keeps the Anthropic encoder from warning that the body lacks one)
    body = _request.encode_request(replace(req, model="") if req.model is None else req, warnings)
    body.pop("model", None)
    if not stream_in_body:
        body.pop("stream", None)
    return {"anthropic_version": version, **body}
