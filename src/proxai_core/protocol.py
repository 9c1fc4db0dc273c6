from __future__ import annotations

from enum import StrEnum


class Protocol(StrEnum):
    """The protocols ProxAI speaks: the codec registry's list. Member ``X`` is served by the ``CODEC``
    of ``proxai_core/codecs/<x>.py``; adding a protocol adds one member here and that module."""

    CHAT = "openai_chat_completions"
    RESPONSES = "openai_responses"
    ANTHROPIC = "anthropic_messages"
    GEMINI = "gemini_generate_content"
    BEDROCK_CONVERSE = "bedrock_converse"
    VERTEX_ANTHROPIC = "vertex_anthropic"
    BEDROCK_INVOKE = "bedrock_invoke"


def as_protocol(value: Protocol | str) -> Protocol:
    """Accept the enum or its plain string; a clear error otherwise."""
    if isinstance(value, Protocol):
        return value
    try:
        return Protocol(value)
    except ValueError:
        names = ", ".join(p.value for p in Protocol)
        raise ValueError(f"unknown protocol {value!r}; expected one of: {names}") from None
