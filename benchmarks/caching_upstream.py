"""Loopback upstreams that account prompt caching the way each provider documents it (for
``benchmarks/session.py``; tested in tests/test_caching_upstream.py).

A request is read as its provider reads it: a sequence of segments in prompt order (tools, then the
system prompt, then each message or content block), each with a token count (about four characters
of its JSON per token) and a prefix hash. Each provider's rules then say how many input tokens came
from the cache:

- **Anthropic** caches only at ``cache_control`` breakpoints (at most four), a prefix of at least
  the model's minimum (1,024 tokens; 2,048 for Claude 3.x Haiku; 4,096 for Opus 4.5 and Haiku 4.5),
  for its TTL (5 minutes, or 1 hour) refreshed on every read. A request reads the longest cached
  prefix ending at one of its breakpoints or up to 20 blocks before one; it writes the prefix at each
  breakpoint not cached yet. Billed: ``cache_read_input_tokens``, ``cache_creation_input_tokens`` (from
  the read up to the last breakpoint), ``input_tokens`` (the rest).
- **OpenAI** caches automatically every prefix of 1,024 tokens or more, in steps of 128 tokens, on
  the machine the request lands on. Requests are routed by their prefix and ``prompt_cache_key``;
  past about 15 requests a minute a prefix spills to other machines — an agent fleet sends the same
  system prompt all the time, so without a key a session's turns land on one of two machines (chosen
  at random, seeded), with a key on one. Billed: ``cached_tokens``.
- **Gemini** (implicit caching) caches every prefix of at least 1,024 tokens (2,048 for Pro models)
  of recent requests; a request reads the longest one it shares. Billed: ``cachedContentTokenCount``.

Each upstream answers a short complete response or stream of its protocol (the usage numbers it
puts there are its accounting) and keeps a ledger of every request: total input, read, written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

from tests.fake_upstream import RECORDED, FakeUpstream, Recorded, Reply

ANTH, RESP, CHAT, GEMINI = "anthropic_messages", "openai_responses", "openai_chat_completions", "gemini_generate_content"
#: the lookback of an Anthropic breakpoint (blocks before it checked for a cached prefix)
LOOKBACK = 20
OPENAI_MINIMUM, OPENAI_STEP = 1024, 128


def tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, sort_keys=True, ensure_ascii=False)) // 4)


@dataclass
class Segment:
    tokens: int
    #: hash of the prompt up to and with this segment
    prefix: str
    #: a breakpoint's TTL in seconds (Anthropic), else None
    ttl: float | None = None


def _chain(items: list[tuple[Any, float | None]]) -> list[Segment]:
    h = hashlib.sha256()
    out = []
    for value, ttl in items:
        h.update(json.dumps(value, sort_keys=True, ensure_ascii=False).encode())
        out.append(Segment(tokens(value), h.copy().hexdigest(), ttl))
    return out


def _ttl(block: Any) -> float | None:
    cc = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(cc, dict):
        return None
    return 3600.0 if cc.get("ttl") == "1h" else 300.0


def _without_marks(value: Any) -> Any:
    """The content of a block as the prompt has it (a breakpoint marks it; it is not prompt text)."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "cache_control"}
    return value


def segments(protocol: str, body: dict[str, Any]) -> list[Segment]:
    """The prompt of a request as its provider caches it."""
    items: list[tuple[Any, float | None]] = []
    if protocol == ANTH:
        for t in body.get("tools") or ():
            items.append((_without_marks(t), _ttl(t)))
        system = body.get("system")
        for b in [{"type": "text", "text": system}] if isinstance(system, str) else system or ():
            items.append((_without_marks(b), _ttl(b)))
        for m in body.get("messages") or ():
            content = m.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            for b in blocks:
                items.append(({"role": m.get("role"), "block": _without_marks(b)}, _ttl(b)))
    elif protocol == RESP:
        if body.get("tools"):
            items.append((body["tools"], None))
        if body.get("instructions"):
            items.append((body["instructions"], None))
        inp = body.get("input")
        for it in [inp] if isinstance(inp, str) else inp or ():
            items.append((it, None))
    elif protocol == CHAT:
        if body.get("tools"):
            items.append((body["tools"], None))
        for m in body.get("messages") or ():
            items.append((m, None))
    else:
        for k in ("systemInstruction", "tools"):
            if body.get(k):
                items.append((body[k], None))
        for c in body.get("contents") or ():
            items.append((c, None))
    return _chain(items)


@dataclass
class Entry:
    """One request's accounting."""

    input_total: int
    cache_read: int = 0
    cache_write: int = 0


@dataclass
class CacheLedger:
    protocol: str
    model: str
    entries: list[Entry] = field(default_factory=list)
    #: simulated seconds between requests (an agent's turn)
    turn_seconds: float = 20.0
    seed: int = 7
    _now: float = 0.0
    #: Anthropic: prefix hash -> expiry; OpenAI: machine -> prefix hash -> tokens; Gemini: prefix -> tokens
    _anth: dict[str, float] = field(default_factory=dict)
    _machines: dict[str, dict[str, int]] = field(default_factory=dict)
    _gemini: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def account(self, body: dict[str, Any]) -> Entry:
        self._now += self.turn_seconds
        segs = segments(self.protocol, body)
        total = sum(s.tokens for s in segs)
        if self.protocol == ANTH:
            e = self._anthropic(segs, total)
        elif self.protocol == GEMINI:
            e = self._implicit(segs, total)
        else:
            e = self._openai(segs, total, body.get("prompt_cache_key"))
        self.entries.append(e)
        return e

    # --- Anthropic: breakpoints, minimum length, TTL, 20-block lookback
    def _anthropic(self, segs: list[Segment], total: int) -> Entry:
        minimum = anthropic_minimum(self.model)
        cum = _cumulative(segs)
        marks = [i for i, s in enumerate(segs) if s.ttl is not None][:4]
        read_end = -1
        for b in marks:
            for j in range(b, max(-1, b - LOOKBACK - 1), -1):
                if self._anth.get(segs[j].prefix, -1.0) >= self._now and cum[j] >= minimum:
                    read_end = max(read_end, j)
                    break
        read = cum[read_end] if read_end >= 0 else 0
        if read_end >= 0:
            for b in marks:  # a read refreshes the entries it used
                if b <= read_end and segs[b].prefix in self._anth:
                    self._anth[segs[b].prefix] = self._now + (segs[b].ttl or 300.0)
            self._anth[segs[read_end].prefix] = max(self._anth[segs[read_end].prefix], self._now + 300.0)
        written_to = read_end
        for b in marks:
            if cum[b] >= minimum and b > read_end:
                self._anth[segs[b].prefix] = self._now + (segs[b].ttl or 300.0)
                written_to = max(written_to, b)
        write = cum[written_to] - read if written_to > read_end else 0
        return Entry(total, read, write)

    # --- OpenAI: automatic prefixes from 1,024 tokens in 128-token steps, per machine
    def _openai(self, segs: list[Segment], total: int, key: Any) -> Entry:
        machine = f"key:{key}" if isinstance(key, str) and key else f"spill:{self._rng.randrange(2)}"
        cache = self._machines.setdefault(machine, {})
        cum = _cumulative(segs)
        hit = max((cum[i] for i, s in enumerate(segs) if s.prefix in cache), default=0)
        read = 0 if hit < OPENAI_MINIMUM else (hit // OPENAI_STEP) * OPENAI_STEP
        for i, s in enumerate(segs):
            if cum[i] >= OPENAI_MINIMUM:
                cache[s.prefix] = cum[i]
        return Entry(total, read)

    # --- Gemini: implicit caching of shared prefixes
    def _implicit(self, segs: list[Segment], total: int) -> Entry:
        minimum = 2048 if "pro" in self.model else 1024
        cum = _cumulative(segs)
        hit = max((cum[i] for i, s in enumerate(segs) if s.prefix in self._gemini), default=0)
        read = hit if hit >= minimum else 0
        for i, s in enumerate(segs):
            if cum[i] >= minimum:
                self._gemini[s.prefix] = cum[i]
        return Entry(total, read)

    # --- totals
    @property
    def input_total(self) -> int:
        return sum(e.input_total for e in self.entries)

    @property
    def cache_read(self) -> int:
        return sum(e.cache_read for e in self.entries)

    @property
    def cache_write(self) -> int:
        return sum(e.cache_write for e in self.entries)

    @property
    def read_share(self) -> float:
        return self.cache_read / self.input_total if self.input_total else 0.0


def anthropic_minimum(model: str) -> int:
    m = model.lower().replace(".", "-")
    if "opus-4-5" in m or "haiku-4-5" in m:
        return 4096
    return 2048 if "haiku" in m else 1024


def _cumulative(segs: list[Segment]) -> list[int]:
    out, t = [], 0
    for s in segs:
        t += s.tokens
        out.append(t)
    return out


# ----------------------------------------------------------------------------- the answers
def _usage_reply(protocol: str, entry: Entry, streaming: bool, rec_model: str) -> Reply:
    """A short answer of the protocol whose usage is the ledger's accounting."""
    rec = copy.deepcopy(RECORDED[protocol]["text"])
    fresh = entry.input_total - entry.cache_read - entry.cache_write
    if protocol == ANTH:
        usage = {"input_tokens": fresh, "cache_read_input_tokens": entry.cache_read,
                 "cache_creation_input_tokens": entry.cache_write, "output_tokens": 20}
        if not streaming:
            rec["json"]["usage"] = usage
            return Reply.json(rec["json"])
        for ev in rec["sse"]:
            data = ev[1] if isinstance(ev, (list, tuple)) else ev
            if isinstance(data, dict) and data.get("type") == "message_start":
                data["message"]["usage"] = dict(usage, output_tokens=1)
        return Reply.sse(rec["sse"])
    if protocol in (RESP, CHAT):
        return Reply.sse(rec["sse"]) if streaming else Reply.json(rec["json"])
    return Reply.gemini_stream(rec["sse"]) if streaming else Reply.json(rec["json"])


class CachingUpstream(FakeUpstream):
    """A strict fake upstream of one protocol whose every generation request is accounted by a
    :class:`CacheLedger` (only the real generation paths are served)."""

    def __init__(self, protocol: str, model: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.ledger = CacheLedger(protocol, model)
        self._current: Recorded | None = None

    async def _respond(self, rec: Recorded, writer: Any) -> bool:
        self._current = rec
        return await super()._respond(rec, writer)

    def _pick(self, path: str, streaming: bool) -> Reply | None:
        reply = super()._pick(path, streaming)
        rec = self._current
        if reply is None or reply.status != 200 or rec is None or not rec.body:
            return reply
        body = json.loads(rec.body)
        if not isinstance(body, dict):
            return reply
        entry = self.ledger.account(body)
        return _usage_reply(self.ledger.protocol, entry, streaming, self.ledger.model)
