"""End-to-end cost of the addon through one mitmdump: translated vs passed through.

    uv run python benchmarks/proxy.py            # writes the "proxy" section of docs/performance.md
    uv run python benchmarks/proxy.py --quick --no-write

One mitmdump (reverse mode, the ProxAI addon loaded, flows not saved) in front of the loopback echo
upstream (tests/proxai_mitm_faults/echo_upstream.py). The same workload for each client protocol —
a streamed answer of ``--deltas`` text events and the same text as one complete JSON answer — is
sent either through a route that translates it (Chat client → Anthropic upstream, Responses →
Chat, Anthropic → Responses) or passed through to an upstream of the client's own protocol (no
route: the addon only observes and annotates the flow).

- **CPU per request**: user+system CPU seconds of the mitmdump process (/proc/<pid>/stat) over
  batches of requests, cells interleaved batch by batch; ratio translated / passed through.
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


def cells() -> list[tuple[str, str | None, bool]]:
    out = []
    for c in (CHAT, RESP, ANTH):
        for stream in (True, False):
            out.append((c, TRANSLATE_TO[c], stream))
            out.append((c, None, stream))
    return out


async def batch(rig: Rig, cell, n: int, conc: int, tag: str) -> list:
    """``n`` requests of one cell, ``conc`` at a time; tokens ``<tag>_<i>``."""
    client, upstream, stream = cell
    sem = asyncio.Semaphore(conc)
    results = []

    async def one(i: int):
        tok = f"{tag}_{i}"
        body = json.dumps(request_body(client, tok, stream)).encode()
        async with sem:
            r = await http_request("127.0.0.1", rig.port, client_path(client, upstream), body, HEADERS, timeout=30)
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
    how = f"→ {SHORT[upstream]} (translated)" if upstream else "pass-through"
    return f"{SHORT[client]} client, {'stream' if stream else 'complete'}, {how}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deltas", type=int, default=40, help="text events per streamed answer")
    ap.add_argument("--rounds", type=int, default=6)
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
    rig = Rig(save=False, n_deltas=args.deltas, keep_requests=False).start()
    errors: list[str] = []
    cpu: dict = {c: 0.0 for c in all_cells}
    count: dict = {c: 0 for c in all_cells}
    lat: dict = {c: [] for c in all_cells}
    try:
        for c in all_cells:  # warm-up
            for tok, r in asyncio.run(batch(rig, c, 3, 1, f"w{all_cells.index(c)}")):
                if (e := check(c, tok, r, args.deltas)):
                    errors.append(f"warm-up {cell_name(c)}: {e}")
        # --- CPU: interleaved batches
        for rnd in range(args.rounds):
            order = all_cells[rnd % len(all_cells):] + all_cells[: rnd % len(all_cells)]
            for c in order:
                s0 = proc_stat(rig.pid)["cpu"]
                res = asyncio.run(batch(rig, c, args.batch, args.conc, f"c{rnd}x{all_cells.index(c)}"))
                time.sleep(0.05)  # let the proxy finish annotating/logging the last flows
                cpu[c] += proc_stat(rig.pid)["cpu"] - s0
                count[c] += len(res)
                errors += [f"{cell_name(c)}: {e}" for tok, r in res if (e := check(c, tok, r, args.deltas))]
        # --- first-byte delay: sequential, upstream pauses first_delay after its head
        rig.up.first_delay = args.first_delay
        for i in range(args.latency_n):
            for c in all_cells:
                (tok, r), = asyncio.run(batch(rig, c, 1, 1, f"l{i}x{all_cells.index(c)}"))
                if (e := check(c, tok, r, args.deltas)):
                    errors.append(f"{cell_name(c)}: {e}")
                    continue
                st = rig.up.stamps.get(tok)
                if st and r.t_first_body:
                    lat[c].append((r.t_first_body - st.first) * 1000.0)
        log = rig.m.log
    finally:
        rig.close()
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: `uv run python benchmarks/proxy.py"
             f"{' --quick' if args.quick else ''}` — one mitmdump 12.3 with the addon (flows not saved), loopback "
             f"echo upstream; a streamed answer = {args.deltas} text events (+ the protocol's framing events), a "
             f"complete answer = the same text as one JSON body; {sum(count.values())} requests for CPU "
             f"({args.rounds} interleaved rounds × {args.batch} per cell, {args.conc} concurrent), "
             f"{args.latency_n} sequential requests per cell for the first-byte delay; {os.cpu_count()}-CPU "
             f"machine shared with other work. Errors: **{len(errors)}**"
             f"{'' if 'Traceback' not in log else ', **traceback in the mitmdump log**'}.", "",
             "| client, answer | CPU ms/request translated | CPU ms/request passed through | **ratio** (target ≤ 1.3) | "
             "first-byte delay translated: median / p90 ms | passed through: median / p90 ms |",
             "|---|---|---|---|---|---|"]
    summary = {}
    for client in (CHAT, RESP, ANTH):
        for stream in (True, False):
            t, p = (client, TRANSLATE_TO[client], stream), (client, None, stream)
            ct, cp = 1000 * cpu[t] / max(1, count[t]), 1000 * cpu[p] / max(1, count[p])
            ratio = ct / cp if cp else float("nan")

            def q(v, f):
                return sorted(v)[min(len(v) - 1, int(len(v) * f))] if v else float("nan")

            lt, lp = lat[t], lat[p]
            summary[(client, stream)] = (ratio, statistics.median(lt) if lt else float("nan"))
            lines.append(f"| {SHORT[client]} → {SHORT[TRANSLATE_TO[client]]}, {'stream' if stream else 'complete'} | "
                         f"{ct:.2f} | {cp:.2f} | **{ratio:.2f}** | "
                         f"{statistics.median(lt) if lt else float('nan'):.2f} / {q(lt, 0.9):.2f} | "
                         f"{statistics.median(lp) if lp else float('nan'):.2f} / {q(lp, 0.9):.2f} |")
    all_t = [cpu[c] for c in all_cells if c[1]]
    all_p = [cpu[c] for c in all_cells if not c[1]]
    n_t = sum(count[c] for c in all_cells if c[1])
    n_p = sum(count[c] for c in all_cells if not c[1])
    overall = (sum(all_t) / n_t) / (sum(all_p) / n_p) if n_p and sum(all_p) else float("nan")
    stream_lat = [v for c in all_cells if c[1] and c[2] for v in lat[c]]
    lines += ["", f"Overall CPU ratio translated / passed through: **{overall:.2f}**; first-byte delay of translated "
              f"streams, all directions: median **{statistics.median(stream_lat):.2f} ms** "
              f"(p90 {sorted(stream_lat)[int(len(stream_lat) * 0.9)]:.2f} ms; target ≤ 2 ms median)."
              if stream_lat else ""]
    if errors:
        lines += ["", "Errors:", ""] + [f"- {e}" for e in errors[:20]]
    text = "\n".join(lines)
    print(text)
    if not args.no_write and not args.quick:
        write_section(ROOT / "docs" / "performance.md", "proxy",
                      "### End to end through mitmdump: translated vs passed through\n\n" + text, "Performance")
        print("wrote the proxy section of docs/performance.md")


if __name__ == "__main__":
    main()
