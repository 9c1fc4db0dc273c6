"""One decoder and one encoder per protocol; see :mod:`proxai_core.codecs.base` for the contract."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from ..protocol import Protocol

_MODULES = {
    Protocol.CHAT: "proxai_core.codecs.chat",
    Protocol.RESPONSES: "proxai_core.codecs.responses",
    Protocol.ANTHROPIC: "proxai_core.codecs.anthropic",
    Protocol.GEMINI: "proxai_core.codecs.gemini",
}
_cache: dict[Protocol, ModuleType] = {}


def codec(protocol: Protocol) -> ModuleType:
    mod = _cache.get(protocol)
    if mod is None:
        mod = _cache[protocol] = import_module(_MODULES[protocol])
    return mod
