"""ProxAI translator core: a neutral model, one codec per protocol (``get(protocol)``, ``all_codecs()``),
StopInfo. Never imports mitmproxy."""

from .api import (
    ResponseResult,
    StreamTranslator,
    build_context,
    decode_request,
    decode_response,
    error_response,
    error_stop_info,
    response_from_stream,
    stop_info,
    stop_of_error,
    stream_from_response,
    translate_error,
    translate_request,
    translate_response,
    translate_response_result,
)
from .codecs import Codec, all_codecs, get
from .context import ClientContext, short_tool_name
from .errors import TranslationError
from .exchange import Exchange, Outcome, Plan
from .jsonutil import dumps
from .protocol import Protocol
from .stop import GENERIC_CONTENT_FILTER_REFUSAL, StopInfo, StopReason, classify_stop

__all__ = [
    "Exchange",
    "Outcome",
    "Plan",
    "Protocol",
    "Codec",
    "get",
    "all_codecs",
    "StopInfo",
    "StopReason",
    "classify_stop",
    "GENERIC_CONTENT_FILTER_REFUSAL",
    "TranslationError",
    "translate_request",
    "translate_response",
    "translate_response_result",
    "translate_error",
    "stop_info",
    "StreamTranslator",
    "stream_from_response",
    "response_from_stream",
    "decode_request",
    "decode_response",
    "error_response",
    "error_stop_info",
    "stop_of_error",
    "ResponseResult",
    "ClientContext",
    "build_context",
    "short_tool_name",
    "dumps",
]
