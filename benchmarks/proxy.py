"""End-to-end cost of the addon through mitmdump: translated, passed through, and bare mitmdump.

    uv run python benchmarks/proxy.py            # writes the "proxy" section of docs/performance.md
    uv run python benchmarks/proxy.py --quick --no-write

Two mitmdumps in reverse mode in front of the same loopback echo upstream
(tests/proxai_mitm_faults/echo_upstream.py), flows not saved: one with the ProxAI addon, one
**bare** (no addon at all, mitmproxy's defaults). The same workload for each client protocol — a
streamed answer of ``--deltas`` text events and the same text as one complete JSON answer — is sent
through the addon with a route that translates it (Chat client → Anthropic upstream, Responses →
Chat, Anthropic → Responses), through the addon passed through to an upstream of the client's own
protocol (no route: the addon only observes and annotates the flow), and through the bare mitmdump.

- **CPU per request**: user+system CPU seconds of each mitmdump process (/proc/<pid>/stat) over
  batches of requests, cells interleaved batch by batch; ratios to bare mitmdump (targets:
  translated stream ≤ 1.15×, pass-through ≤ 1.05×) and translated / passed through.
- **First-byte delay**: for a stream, the time from the moment the upstream writes the first SSE
  event (``time.monotonic()`` just before the write) to the moment the client reads the first body
  byte (``time.monotonic()``; one host, so both are CLOCK_MONOTONIC). The upstream waits
  ``--first-delay`` after its response head so the proxy is idle when the event arrives. Requests
  one at a time. For complete answers the same delay covers reading, translating and re-sending
  the whole body.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # no script here may shadow a library
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from benchmarks._common import write_section  # noqa: E402
from tests.proxai_mitm_faults.echo_upstream import (  # noqa: E402
    SHORT,
    Rig,
    client_path,
    echo_text,
    http_request,
    proc_stat,
    request_body,
)

CHAT, RESP, ANTH = "openai_chat_completions", "openai_responses", "anthropic_messages"
TRANSLATE_TO = {CHAT: ANTH, RESP: CHAT, ANTH: RESP}
HEADERS = {"authorization": "Bearer sk-bench-client", "x-api-key": "sk-bench-client"}


BARE = "bare"
BARE_STREAM = "bare-stream"
BARE_SSE = "bare-sse"
BARES = (BARE, BARE_STREAM, BARE_SSE)
#: the floor of streaming an answer as it comes: mitmdump with a script that only sets
#: ``flow.response.stream = True`` on event-stream answers (no ProxAI; requests stay buffered, as with the addon)
SSE_ONLY_SCRIPT = """
class StreamEventStreams:
    def responseheaders(self, flow):
        if "text/event-stream" in flow.response.headers.get("content-type", ""):
            flow.response.stream = True
addons = [StreamEventStreams()]
"""


def cells() -> list[tuple[str, str | None, bool]]:
    """(client, upstream, stream): upstream = the translated-to protocol, None = pass-through through
    the addon, BARE = the same request through the bare mitmdump, BARE_STREAM = through a bare
    mitmdump that streams bodies (``stream_large_bodies=1``, as the addon streams an SSE answer; it
    streams the request too), BARE_SSE = through a mitmdump that streams event-stream answers only
    (SSE_ONLY_SCRIPT: what streaming alone costs)."""
    out = []
    for c in (CHAT, RESP, ANTH):
        for stream in (True, False):
            out.append((c, TRANSLATE_TO[c], stream))
            out.append((c, None, stream))
            out.append((c, BARE, stream))
            out.append((c, BARE_STREAM, stream))
            out.append((c, BARE_SSE, stream))
    return out


class Proxies:
    def __init__(self, rig: Rig, bare: dict) -> None:
        self.rig, self.bare = rig, bare

    def port(self, cell) -> int:
        return self.bare[cell[1]].port if cell[1] in BARES else self.rig.port

    def pid(self, cell) -> int:
        return self.bare[cell[1]].proc.pid if cell[1] in BARES else self.rig.pid

    def path(self, cell) -> str:
        client, upstream, _ = cell
        return client_path(client, None if upstream in BARES else upstream)


async def batch(px: Proxies, cell, n: int, conc: int, tag: str) -> list:
    """``n`` requests of one cell, ``conc`` at a time; tokens ``<tag>_<i>``."""
    client, upstream, stream = cell
    sem = asyncio.Semaphore(conc)
    results = []

    async def one(i: int):
        tok = f"{tag}_{i}"
        body = json.dumps(request_body(client, tok, stream)).encode()
        async with sem:
            r = await http_request("127.0.0.1", px.port(cell), px.path(cell), body, HEADERS, timeout=30)
        results.append((tok, r))

    await asyncio.gather(*(one(i) for i in range(n)))
    return results


def check(cell, tok, r, n_deltas) -> str | None:
    if r.error or r.status != 200:
        return f"{r.status} {r.error} {r.body[:120]!r}"
    if echo_text(tok, n_deltas).split(":")[0].encode() not in r.body:
        return "wrong text"
    return None


def cell_name(cell) -> str:
    client, upstream, stream = cell
    how = ("bare mitmdump" if upstream == BARE else "bare mitmdump, streaming" if upstream == BARE_STREAM else
           "mitmdump streaming SSE answers only" if upstream == BARE_SSE else
           f"→ {SHORT[upstream]} (translated)" if upstream else "pass-through")
    return f"{SHORT[client]} client, {'stream' if stream else 'complete'}, {how}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deltas", type=int, default=40, help="text events per streamed answer")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batch", type=int, default=30, help="requests per cell per round (CPU)")
    ap.add_argument("--conc", type=int, default=4, help="concurrent requests in a CPU batch")
    ap.add_argument("--latency-n", type=int, default=60, help="sequential requests per cell (first byte)")
    ap.add_argument("--first-delay", type=float, default=0.02)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.batch, args.latency_n = 2, 10, 15
    all_cells = cells()
    from tests.mitm_harness import Mitmdump

    rig = Rig(save=False, n_deltas=args.deltas, keep_requests=False)
    tmp = tempfile.TemporaryDirectory(prefix="proxai-bench-")
    sse_only = Path(tmp.name) / "stream_event_streams.py"
    sse_only.write_text(SSE_ONLY_SCRIPT)
    bare = {BARE: Mitmdump(mode=f"reverse:{rig.up.url}", save=False, addon=None),
            BARE_STREAM: Mitmdump(mode=f"reverse:{rig.up.url}", save=False, addon=None,
                                  options={"stream_large_bodies": "1"}),
            BARE_SSE: Mitmdump(mode=f"reverse:{rig.up.url}", save=False, addon=sse_only)}
    px = Proxies(rig, bare)
    errors: list[str] = []
    cpu: dict = {c: 0.0 for c in all_cells}
    count: dict = {c: 0 for c in all_cells}
    lat: dict = {c: [] for c in all_cells}
    try:  # every proxy started inside: a failed start still stops the others
        rig.start()
        for m in bare.values():
            m.start()
        for c in all_cells:  # warm-up
            for tok, r in asyncio.run(batch(px, c, 3, 1, f"w{all_cells.index(c)}")):
                if (e := check(c, tok, r, args.deltas)):
                    errors.append(f"warm-up {cell_name(c)}: {e}")
        # --- CPU: interleaved batches
        for rnd in range(args.rounds):
            order = all_cells[rnd % len(all_cells):] + all_cells[: rnd % len(all_cells)]
            for c in order:
                s0 = proc_stat(px.pid(c))["cpu"]
                res = asyncio.run(batch(px, c, args.batch, args.conc, f"c{rnd}x{all_cells.index(c)}"))
                time.sleep(0.05)  # let the proxy finish annotating/logging the last flows
                cpu[c] += proc_stat(px.pid(c))["cpu"] - s0
                count[c] += len(res)
                errors += [f"{cell_name(c)}: {e}" for tok, r in res if (e := check(c, tok, r, args.deltas))]
        # --- first-byte delay: sequential, upstream pauses first_delay after its head
        rig.up.first_delay = args.first_delay
        for i in range(args.latency_n):
            for c in all_cells:
                (tok, r), = asyncio.run(batch(px, c, 1, 1, f"l{i}x{all_cells.index(c)}"))
                if (e := check(c, tok, r, args.deltas)):
                    errors.append(f"{cell_name(c)}: {e}")
                    continue
                st = rig.up.stamps.get(tok)
                if st and r.t_first_body:
                    lat[c].append((r.t_first_body - st.first) * 1000.0)
        log = rig.m.log
    finally:
        rig.close()
        for m in bare.values():
            m.cleanup()
        tmp.cleanup()
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: `uv run python benchmarks/proxy.py"
             f"{' --quick' if args.quick else ''}` — four mitmdump 12.3 in reverse mode: one with the addon, "
             f"two bare (no addon; mitmproxy's defaults, which buffer a streamed answer whole, and "
             f"stream_large_bodies=1, which streams it and the request), and one whose only script sets "
             f"`flow.response.stream = True` on event-stream answers (the cost of streaming alone), flows not saved, "
             f"loopback echo upstream; a streamed answer = {args.deltas} text events (+ the protocol's framing "
             f"events), a complete answer = the same text as one JSON body; {sum(count.values())} requests for "
             f"CPU ({args.rounds} interleaved rounds × {args.batch} per cell, {args.conc} concurrent), "
             f"{args.latency_n} sequential requests per cell for the first-byte delay; {os.cpu_count()}-CPU "
             f"machine shared with other work. Errors: **{len(errors)}**"
             f"{'' if 'Traceback' not in log else ', **traceback in the mitmdump log**'}.", "",
             "| client, answer | CPU ms/request: translated / passed through / bare / bare streaming / "
             "streaming SSE only | **translated ÷ bare** (stream target ≤ 1.15) | **passed through ÷ bare** "
             "(target ≤ 1.05) | streaming SSE only ÷ bare | translated ÷ / passed through ÷ bare streaming | "
             "first-byte delay median / p90 ms: translated / passed through / bare / bare streaming |",
             "|---|---|---|---|---|---|---|"]

    def ms(c) -> float:
        return 1000 * cpu[c] / max(1, count[c])

    def q(v, f):
        return sorted(v)[min(len(v) - 1, int(len(v) * f))] if v else float("nan")

    def med(v):
        return statistics.median(v) if v else float("nan")

    for client in (CHAT, RESP, ANTH):
        for stream in (True, False):
            t, p = (client, TRANSLATE_TO[client], stream), (client, None, stream)
            b, bs = (client, BARE, stream), (client, BARE_STREAM, stream)
            ct, cp, cb, cbs, css = ms(t), ms(p), ms(b), ms(bs), ms((client, BARE_SSE, stream))
            lines.append(f"| {SHORT[client]} → {SHORT[TRANSLATE_TO[client]]}, {'stream' if stream else 'complete'} | "
                         f"{ct:.2f} / {cp:.2f} / {cb:.2f} / {cbs:.2f} / {css:.2f} | **{ct / cb:.2f}** | "
                         f"**{cp / cb:.2f}** | {css / cb:.2f} | {ct / cbs:.2f} / {cp / cbs:.2f} | "
                         + " · ".join(f"{med(lat[c]):.2f} / {q(lat[c], 0.9):.2f}" for c in (t, p, b, bs)) + " |")

    def total(pred) -> float:
        sel = [c for c in all_cells if pred(c)]
        n = sum(count[c] for c in sel)
        return sum(cpu[c] for c in sel) / n if n else float("nan")

    def translated(c) -> bool:
        return c[1] is not None and c[1] not in BARES

    t_stream = total(lambda c: translated(c) and c[2])
    p_all, b_all = total(lambda c: c[1] is None), total(lambda c: c[1] == BARE)
    bs_all = total(lambda c: c[1] == BARE_STREAM)
    b_stream = total(lambda c: c[1] == BARE and c[2])
    bs_stream = total(lambda c: c[1] == BARE_STREAM and c[2])
    sse_stream = total(lambda c: c[1] == BARE_SSE and c[2])
    p_stream = total(lambda c: c[1] is None and c[2])
    t_all = total(translated)
    stream_lat = [v for c in all_cells if translated(c) and c[2] for v in lat[c]]
    lines += ["", f"Overall CPU per request: translated streams ÷ bare streams **{t_stream / b_stream:.2f}** "
              f"(target ≤ 1.15; ÷ bare streaming {t_stream / bs_stream:.2f}), passed through ÷ bare "
              f"**{p_all / b_all:.2f}** (target ≤ 1.05; ÷ bare streaming {p_all / bs_all:.2f}), translated ÷ "
              f"passed through {t_all / p_all:.2f}.",
              f"Streams only: mitmdump streaming SSE answers (no ProxAI) ÷ bare **{sse_stream / b_stream:.2f}** — the "
              f"floor of delivering events as they come; translated streams ÷ that floor {t_stream / sse_stream:.2f}, "
              f"passed-through streams ÷ bare {p_stream / b_stream:.2f}, ÷ that floor {p_stream / sse_stream:.2f}."]
    if stream_lat:
        lines.append(f"First-byte delay of translated streams, all directions: median **{med(stream_lat):.2f} ms** "
                     f"(p90 {q(stream_lat, 0.9):.2f} ms). Bare mitmdump buffers a stream, so its first byte comes "
                     "with the last.")
    if errors:
        lines += ["", "Errors:", ""] + [f"- {e}" for e in errors[:20]]
    text = "\n".join(lines)
    print(text)
    if not args.no_write and not args.quick:
        write_section(ROOT / "docs" / "performance.md", "proxy",
                      "### End to end through mitmdump: translated, passed through, bare mitmdump\n\n" + text,
                      "Performance")
        print("wrote the proxy section of docs/performance.md")


if __name__ == "__main__":
    main()
