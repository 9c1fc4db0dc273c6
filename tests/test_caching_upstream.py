"""The session benchmark's caching upstreams account caching by each provider's documented rules
(benchmarks/caching_upstream.py): a lenient accounting would prove nothing about the hints."""

from __future__ import annotations

from benchmarks.caching_upstream import ANTH, CHAT, GEMINI, RESP, CacheLedger, segments

BIG = "context " * 2000  # ~4,000 tokens
MARK = {"type": "ephemeral"}


def _anth(messages: list, *, system_mark: bool = True, model: str = "claude-sonnet-4-5") -> dict:
    block = {"type": "text", "text": BIG}
    if system_mark:
        block["cache_control"] = MARK
    return {"model": model, "system": [block], "messages": messages}


def _turn(k: int, *, mark: bool) -> list:
    msgs = [{"role": "user", "content": [{"type": "text", "text": "start"}]}]
    for i in range(k):
        msgs += [{"role": "assistant", "content": [{"type": "text", "text": f"step {i}"}]},
                 {"role": "user", "content": [{"type": "text", "text": f"result {i} " * 50}]}]
    if mark:
        msgs[-1]["content"][-1]["cache_control"] = MARK
    return msgs


def test_anthropic_caches_only_at_breakpoints():
    led = CacheLedger(ANTH, "claude-sonnet-4-5")
    first = led.account(_anth(_turn(0, mark=False), system_mark=False))
    again = led.account(_anth(_turn(1, mark=False), system_mark=False))
    assert first.cache_read == again.cache_read == 0 and again.cache_write == 0  # no breakpoint: nothing


def test_anthropic_reads_what_an_earlier_breakpoint_wrote_and_writes_the_rest():
    led = CacheLedger(ANTH, "claude-sonnet-4-5")
    a = led.account(_anth(_turn(1, mark=True)))
    assert a.cache_read == 0 and a.cache_write == a.input_total  # both breakpoints written
    b = led.account(_anth(_turn(2, mark=True)))
    # the previous request's end is within 20 blocks of this one's breakpoint: read, then the new part written
    assert b.cache_read == a.input_total and b.cache_write == b.input_total - a.input_total


def test_anthropic_lookback_is_twenty_blocks():
    led = CacheLedger(ANTH, "claude-sonnet-4-5")
    a = led.account(_anth(_turn(1, mark=True), system_mark=False))
    far = led.account(_anth(_turn(12, mark=True), system_mark=False))  # 22 blocks later
    assert a.cache_write > 0 and far.cache_read == 0


def test_anthropic_minimum_length_and_ttl():
    led = CacheLedger(ANTH, "claude-haiku-4-5")  # 4,096 tokens minimum
    short = {"model": "claude-haiku-4-5", "system": [{"type": "text", "text": "x " * 1000, "cache_control": MARK}],
             "messages": [{"role": "user", "content": "hi"}]}
    led.account(short)
    assert led.account(short).cache_read == 0
    led = CacheLedger(ANTH, "claude-sonnet-4-5", turn_seconds=400)  # past the 5-minute TTL
    body = _anth(_turn(0, mark=False))
    led.account(body)
    assert led.account(body).cache_read == 0
    led = CacheLedger(ANTH, "claude-sonnet-4-5", turn_seconds=100)
    led.account(body)
    assert led.account(body).cache_read > 0


def test_openai_caches_prefixes_in_128_token_steps_per_machine():
    body = {"model": "gpt-5", "instructions": BIG, "input": [{"role": "user", "content": "hi"}]}
    led = CacheLedger(RESP, "gpt-5")
    led.account(dict(body, prompt_cache_key="k"))
    hit = led.account(dict(body, prompt_cache_key="k", input=body["input"] + [{"role": "user", "content": "more"}]))
    assert hit.cache_read >= 1024 and hit.cache_read % 128 == 0 and hit.cache_read <= hit.input_total
    other = led.account(dict(body, prompt_cache_key="other"))
    assert other.cache_read == 0  # another key: another machine
    # without a key the turns spread over two machines: some miss
    led = CacheLedger(CHAT, "gpt-5")
    chat = {"model": "gpt-5", "messages": [{"role": "system", "content": BIG}, {"role": "user", "content": "hi"}]}
    reads = [led.account(chat).cache_read for _ in range(12)]
    assert 0 < sum(1 for r in reads if r) < 11


def test_gemini_implicit_caching_reads_a_shared_prefix():
    led = CacheLedger(GEMINI, "gemini-2.5-flash")
    body = {"systemInstruction": {"parts": [{"text": BIG}]}, "contents": [{"role": "user", "parts": [{"text": "a"}]}]}
    led.account(body)
    hit = led.account(dict(body, contents=body["contents"] + [{"role": "model", "parts": [{"text": "b"}]}]))
    assert hit.cache_read > 1024
    assert led.read_share > 0.4


def test_breakpoints_are_not_prompt_text():
    plain = segments(ANTH, _anth(_turn(1, mark=False), system_mark=False))
    marked = segments(ANTH, _anth(_turn(1, mark=True)))
    assert [s.prefix for s in plain] == [s.prefix for s in marked]
