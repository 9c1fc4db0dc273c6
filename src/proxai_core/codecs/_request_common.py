"""Request-decoding helpers shared by the request codecs (private)."""

from __future__ import annotations

from typing import Any

from ..errors import TranslationError
from ..neutral import Request


class Tail:
    """What a decoder keeps of the top-level fields it does not translate itself."""

    __slots__ = ("extra_keys", "known", "core", "unknown")

    def __init__(self, extra_keys: tuple[str, ...], known: frozenset[str], unknown: str):
        #: fields copied into ``Request.extra`` unchanged (in this order) when not null
        self.extra_keys = extra_keys
        #: every field the decoder knows; the others are warned about
        self.known = known
        #: a body of only these fields has nothing more to look at
        self.core = known - frozenset(extra_keys)
        #: the warning for an unknown field, ``str.format``-ed with its name
        self.unknown = unknown


def read_tail(body: dict[str, Any], req: Request, warnings: list[str], tail: Tail) -> None:
    """``metadata`` (an object), the pass-through extras, a warning per unknown field (body order)."""
    md = body.get("metadata")
    if md is not None:
        if not isinstance(md, dict):
            raise TranslationError(f"metadata: expected an object, got {type(md).__name__}", field="metadata")
        req.metadata = md
    if body.keys() <= tail.core:
        return  # the usual body: nothing more to look at
    extra = req.extra
    for k in tail.extra_keys:
        v = body.get(k)
        if v is not None:
            extra[k] = v
    known = tail.known
    for k in body:
        if k not in known:
            warnings.append(tail.unknown.format(k))


def namespaced_tool_name(namespace: str, name: str) -> str:
    """The flat name a tool of a Responses ``namespace`` tool gets toward targets that only have
    functions (``crm`` + ``lookup`` -> ``crm__lookup``; a namespace already ending in ``__`` is joined
    as is). Encoders still pass it through ``short_tool_name``; the way back is looked up in the
    client's own tool list (``ClientContext.namespaces``), never parsed."""
    return namespace + name if namespace.endswith("__") else f"{namespace}__{name}"
