"""Request-decoding helpers shared by the request codecs (private).

One validation dialect for every client request: an error is a :class:`TranslationError` whose
message is ``field.path: what is wrong`` (``messages[2].content: expected a string or an array, got
integer``; JSON type names), and whose ``field`` is that path. Paths are given as parts (``"messages",
2, "content"``) and joined only when an error is raised, so a valid request pays nothing for them.
Decoders check a field inline (``isinstance(v, str)``) and raise with these builders, or read it
with the getters below.
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeGuard

import orjson

from ..errors import TranslationError
from ..neutral import Opaque, Request, ToolCall, WebSearchCall, WebSearchResults

_JSON_TYPES = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string",
               list: "array", dict: "object"}


def json_type(v: Any) -> str:
    """The JSON name of a decoded value's type (what a client sees in its own body)."""
    return _JSON_TYPES.get(v.__class__) or type(v).__name__


def where(*parts: str | int) -> str:
    """``("messages", 2, "content")`` -> ``messages[2].content``."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif out:
            out += "." + p
        else:
            out = p
    return out or "body"


def invalid(why: str, *path: str | int) -> TranslationError:
    """``path: why`` (raise it)."""
    at = where(*path)
    return TranslationError(f"{at}: {why}", field=at)


def expected(what: str, v: Any, *path: str | int) -> TranslationError:
    """``path: expected <what>, got <json type>`` (raise it); a missing field is ``got null``."""
    return invalid(f"expected {what}, got {json_type(v)}", *path)


def fail(why: str, *path: str | int) -> NoReturn:
    raise invalid(why, *path)


# ----------------------------------------------------------------------------- getters
def is_json_int(v: Any) -> TypeGuard[int]:
    """``v`` is a JSON integer (``bool`` is a subclass of ``int`` in Python; ``true`` is no count)."""
    return isinstance(v, int) and not isinstance(v, bool)


def token_count(answer: Any, key: str) -> int | None:
    """The token count under ``key`` of a counting endpoint's answer (None: not a count)."""
    v = answer.get(key) if isinstance(answer, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 53 else None


def count(v: Any) -> int | None:
    """A token count of a response: a JSON integer, else none (a bool or a float is no count)."""
    return v if is_json_int(v) else None


def req_str(v: Any, *path: str | int) -> str:
    if isinstance(v, str):
        return v
    raise expected("a string", v, *path)


def opt_str(v: Any, *path: str | int) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise expected("a string", v, *path)


def opt_int(v: Any, *path: str | int) -> int | None:
    if v is None or is_json_int(v):
        return v
    raise expected("an integer", v, *path)


def opt_num(v: Any, *path: str | int) -> float | None:
    if v is None or is_json_int(v) or isinstance(v, float):
        return v
    raise expected("a number", v, *path)


def opt_bool(v: Any, *path: str | int) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    raise expected("a boolean", v, *path)


def opt_obj(v: Any, *path: str | int) -> dict[str, Any] | None:
    if v is None or isinstance(v, dict):
        return v
    raise expected("an object", v, *path)


def req_obj(v: Any, *path: str | int) -> dict[str, Any]:
    if isinstance(v, dict):
        return v
    raise expected("an object", v, *path)


def opt_list(v: Any, *path: str | int) -> list[Any] | None:
    if v is None or isinstance(v, list):
        return v
    raise expected("an array", v, *path)


def req_list(v: Any, *path: str | int) -> list[Any]:
    if isinstance(v, list):
        return v
    raise expected("an array", v, *path)


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
        req.metadata = req_obj(md, "metadata")
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


def web_search_as_opaque(p: WebSearchCall | WebSearchResults, target: str) -> Opaque | None:
    """A previous turn's web search part as its issuer's opaque part: request encoders send it back
    only to its issuer (the others drop it with a warning naming it); another provider's search
    carries no payload the target could verify. None: nothing of its own to send back to its issuer
    (Responses results live in their call item, Gemini grounding is not conversation content)."""
    op = p.opaque
    raw = op.get("raw") if op else None
    proto = op.get("protocol") if op else None
    if isinstance(raw, dict) and isinstance(proto, str):
        return Opaque(proto, raw, p.type)
    if proto == target:
        return None
    return Opaque(proto if isinstance(proto, str) else "", {}, p.type)


def tool_input(p: ToolCall, warnings: list[str]) -> dict[str, Any]:
    """A tool call's arguments as the input object Anthropic, Bedrock Converse and Gemini carry (a custom
    tool's free text under ``input``; arguments that are not one JSON object named in a warning)."""
    if p.kind == "custom":
        return {"input": p.arguments}
    if not p.arguments.strip():
        return {}
    try:
        v = orjson.loads(p.arguments)
    except orjson.JSONDecodeError:
        warnings.append(f"tool call {p.id} had invalid JSON arguments; sent with an empty input")
        return {}
    if not isinstance(v, dict):
        warnings.append(f"tool call {p.id} arguments are not a JSON object; wrapped as {{\"value\": ...}}")
        return {"value": v}
    return v
