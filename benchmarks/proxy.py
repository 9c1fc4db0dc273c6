"""End-to-end cost of the addon through mitmdump: translated and passed-through requests beside
mitmdump streaming the same answers with no ProxAI addon.

    uv run python benchmarks/proxy.py            # writes the "proxy" section of docs/performance.md
    uv run python benchmarks/proxy.py --quick --no-write
    uv run python benchmarks/proxy.py --no-write --compare ../bench-main   # another checkout's ProxAI, same run

Mitmdumps in reverse mode in front of a loopback echo upstream (tests/proxai_mitm_faults/echo_upstream.py),
flows not saved, mitmdump's default log level (info): one with the ProxAI addon and the **reference**,
a mitmdump whose only script sets ``flow.response.stream = True`` on event-stream answers — mitmdump
streaming the same SSE with no ProxAI (requests stay buffered, as with the addon). The same workload for
each client protocol — a streamed answer of ``--deltas`` text events and the same text as one complete
JSON answer — is sent through the addon with a route that translates it (Chat client → Anthropic
upstream, Responses → Chat, Anthropic → Responses), through the addon passed through to an upstream of
the client's own protocol (no route: the addon only observes and annotates the flow), and through the
reference. With ``--compare DIR`` a third mitmdump runs the ProxAI of another checkout (``DIR/src``) on
the same cells, so old and new code are measured side by side.

- **CPU per request**: on-CPU time of each mitmdump process (its threads' /proc schedstat) over
  batches of requests, cells interleaved batch by batch, at each client concurrency of ``--conc``
  (default 1 and 20). Budget: a translated streamed request ≤ 1.20× the reference's CPU for the same
  streamed answer, a passed-through one ≤ 1.10×.
- **First-byte delay**: for a stream, the time from the moment the upstream writes the first SSE
  event (``time.monotonic()`` just before the write) to the moment the client reads the first body
  byte (one host, so both are CLOCK_MONOTONIC). The upstream waits ``--first-delay`` after its
  response head so the proxy is idle when the event arrives. Requests one at a time. For complete
  answers the same delay covers reading, translating and re-sending the whole body.
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
    PATHS,
    SHORT,
    Rig,
    client_path,
    echo_text,
    http_request,
    request_body,
)

CHAT, RESP, ANTH = "openai_chat_completions", "openai_responses", "anthropic_messages"
CLIENTS = (CHAT, RESP, ANTH)
TRANSLATE_TO = {CHAT: ANTH, RESP: CHAT, ANTH: RESP}
HEADERS = {"authorization": "Bearer sk-bench-client", "x-api-key": "sk-bench-client"}
TARGET_TRANSLATED, TARGET_PASS = 1.20, 1.10

#: how a cell's request goes: translated or passed through by ProxAI (this checkout or the compared
#: one), or through the reference mitmdump
TRANSLATED, PASSED, REF, CMP_TRANSLATED, CMP_PASSED = "translated", "passed", "ref", "cmp-translated", "cmp-passed"
#: translated on a route with a fallback whose own upstream answers (the fallback is never asked)
FALLBACK = "fallback"
#: routes ``/fb-<protocol>/...``: the same translation as ``/to-<protocol>/...`` with a fallback
FALLBACK_ROUTES = "".join(
    f'[[routes]]\nname = "fb-{s}"\nmatch = {{ path = "/fb-{s}/*" }}\n'
    f'target = {{ protocol = "{p}", base_url = "{{UP}}", api_key_env = "PROXAI_BENCH_FALLBACK_KEY" }}\n'
    f'[[routes.fallbacks]]\nprotocol = "{p}"\nbase_url = "{{UP}}"\napi_key_env = "PROXAI_BENCH_FALLBACK_KEY"\n\n'
    for p, s in SHORT.items())
#: the reference: mitmdump streaming event-stream answers, nothing else
SSE_ONLY_SCRIPT = """
class StreamEventStreams:
    def responseheaders(self, flow):
        if "text/event-stream" in flow.response.headers.get("content-type", ""):
            flow.response.stream = True
addons = [StreamEventStreams()]
"""


def cpu_seconds(pid: int) -> float:
    """On-CPU time of every thread of a process, in seconds (the scheduler's nanosecond count:
    /proc/<pid>/stat counts in 10 ms ticks, too coarse for batches of a few hundred ms)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended in between: its time is lost from this sample only
    return total / 1e9


class Proxies:
    """The mitmdump (port, pid, echo upstream) behind each kind of cell."""

    def __init__(self, rig: Rig, ref, cmp_rig: Rig | None) -> None:
        self.rig, self.ref, self.cmp = rig, ref, cmp_rig

    def port(self, how: str) -> int:
        return self.ref.port if how == REF else self.cmp.port if how.startswith("cmp") else self.rig.port

    def pid(self, how: str) -> int:
        return self.ref.proc.pid if how == REF else self.cmp.pid if how.startswith("cmp") else self.rig.pid

    def up(self, how: str):
        return self.cmp.up if how.startswith("cmp") else self.rig.up  # the reference is in front of rig.up


def path(cell) -> str:
    client, how, _ = cell
    if how == FALLBACK:
        return f"/fb-{SHORT[TRANSLATE_TO[client]]}{PATHS[client]}"
    return client_path(client, TRANSLATE_TO[client] if how in (TRANSLATED, CMP_TRANSLATED) else None)


async def batch(px: Proxies, cell, n: int, conc: int, tag: str) -> list:
    """``n`` requests of one cell, ``conc`` at a time; tokens ``<tag>_<i>``."""
    client, how, stream = cell
    sem = asyncio.Semaphore(conc)
    results = []

    async def one(i: int):
        tok = f"{tag}_{i}"
        body = json.dumps(request_body(client, tok, stream)).encode()
        async with sem:
            r = await http_request("127.0.0.1", px.port(how), path(cell), body, HEADERS, timeout=30)
        results.append((tok, r))

    await asyncio.gather(*(one(i) for i in range(n)))
    return results


def check(tok, r, n_deltas) -> str | None:
    if r.error or r.status != 200:
        return f"{r.status} {r.error} {r.body[:120]!r}"
    if echo_text(tok, n_deltas).split(":")[0].encode() not in r.body:
        return "wrong text"
    return None


def cell_name(cell) -> str:
    client, how, stream = cell
    what = {TRANSLATED: f"→ {SHORT[TRANSLATE_TO[client]]} (translated)", PASSED: "pass-through",
            REF: "reference mitmdump", FALLBACK: f"→ {SHORT[TRANSLATE_TO[client]]} (translated, route with a fallback)",
            CMP_TRANSLATED: f"→ {SHORT[TRANSLATE_TO[client]]} (translated, compared)",
            CMP_PASSED: "pass-through, compared"}[how]
    return f"{SHORT[client]} client, {'stream' if stream else 'complete'}, {what}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deltas", type=int, default=40, help="text events per streamed answer")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batch", type=int, default=40, help="requests per cell per round (CPU)")
    ap.add_argument("--conc", default="1,20", help="client concurrencies, comma-separated (CPU)")
    ap.add_argument("--latency-n", type=int, default=30, help="sequential requests per cell (first byte)")
    ap.add_argument("--first-delay", type=float, default=0.02)
    ap.add_argument("--compare", type=Path, help="a checkout whose src/ ProxAI also runs, side by side")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.batch, args.latency_n = 2, 20, 10
    concs = [int(c) for c in args.conc.split(",")]
    hows = [TRANSLATED, PASSED, REF, FALLBACK] + ([CMP_TRANSLATED, CMP_PASSED] if args.compare else [])
    all_cells = [(c, how, s) for c in CLIENTS for s in (True, False) for how in hows]
    from tests.mitm_harness import Mitmdump

    rig = Rig(save=False, n_deltas=args.deltas, keep_requests=False, extra_routes=FALLBACK_ROUTES,
              env={"PROXAI_BENCH_FALLBACK_KEY": "sk-bench-fallback-key"})
    cmp_rig = (Rig(save=False, n_deltas=args.deltas, keep_requests=False,
                   env={"PYTHONPATH": str(args.compare.resolve() / "src")}) if args.compare else None)
    tmp = tempfile.TemporaryDirectory(prefix="proxai-bench-")
    sse_only = Path(tmp.name) / "stream_event_streams.py"
    sse_only.write_text(SSE_ONLY_SCRIPT)
    ref = Mitmdump(mode=f"reverse:{rig.up.url}", save=False, addon=sse_only)
    px = Proxies(rig, ref, cmp_rig)
    errors: list[str] = []
    cpu = {(k, c): 0.0 for k in concs for c in all_cells}
    count = {(k, c): 0 for k in concs for c in all_cells}
    lat: dict = {c: [] for c in all_cells}
    try:  # every proxy started inside: a failed start still stops the others
        rig.start()
        ref.start()
        if cmp_rig:
            cmp_rig.start()
        for c in all_cells:  # warm-up
            for tok, r in asyncio.run(batch(px, c, 3, 1, f"w{all_cells.index(c)}")):
                if (e := check(tok, r, args.deltas)):
                    errors.append(f"warm-up {cell_name(c)}: {e}")
        # --- CPU: interleaved batches, every concurrency in each round
        for rnd in range(args.rounds):
            order = all_cells[rnd % len(all_cells):] + all_cells[: rnd % len(all_cells)]
            for k in concs:
                for c in order:
                    s0 = cpu_seconds(px.pid(c[1]))
                    res = asyncio.run(batch(px, c, args.batch, k, f"c{rnd}k{k}x{all_cells.index(c)}"))
                    time.sleep(0.05)  # let the proxy finish annotating/logging the last flows
                    cpu[k, c] += cpu_seconds(px.pid(c[1])) - s0
                    count[k, c] += len(res)
                    errors += [f"{cell_name(c)}: {e}" for tok, r in res if (e := check(tok, r, args.deltas))]
        # --- first-byte delay: sequential, upstream pauses first_delay after its head
        rig.up.first_delay = args.first_delay
        if cmp_rig:
            cmp_rig.up.first_delay = args.first_delay
        for i in range(args.latency_n):
            for c in all_cells:
                (tok, r), = asyncio.run(batch(px, c, 1, 1, f"l{i}x{all_cells.index(c)}"))
                if (e := check(tok, r, args.deltas)):
                    errors.append(f"{cell_name(c)}: {e}")
                    continue
                st = px.up(c[1]).stamps.get(tok)
                if st and r.t_first_body:
                    lat[c].append((r.t_first_body - st.first) * 1000.0)
        logs = rig.m.log + (cmp_rig.m.log if cmp_rig else "")
    finally:
        rig.close()
        ref.cleanup()
        if cmp_rig:
            cmp_rig.close()
        tmp.cleanup()

    def ms(k, c) -> float:
        return 1000 * cpu[k, c] / max(1, count[k, c])

    def total(k, how, stream) -> float:
        sel = [c for c in all_cells if c[1] == how and c[2] == stream]
        n = sum(count[k, c] for c in sel)
        return sum(cpu[k, c] for c in sel) / n if n else float("nan")

    def q(v, f):
        return sorted(v)[min(len(v) - 1, int(len(v) * f))] if v else float("nan")

    def med(v):
        return statistics.median(v) if v else float("nan")

    n_req = sum(count.values())
    compared = ""
    if args.compare:
        import subprocess

        rev = subprocess.run(["git", "-C", str(args.compare), "log", "-1", "--format=%h %cs"],
                             capture_output=True, text=True).stdout.strip()
        compared = f" --compare {args.compare.name}` (a checkout at {rev or 'an unknown commit'})"
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: `uv run python benchmarks/proxy.py"
             f"{' --quick' if args.quick else ''}{f' --conc {args.conc}' if args.conc != '1,20' else ''}"
             f"{f' --rounds {args.rounds}' if args.rounds != 4 and not args.quick else ''}{compared or '`'} — "
             f"mitmdump 12.3 in reverse mode, one with the addon and the reference (a script that only sets "
             f"`flow.response.stream = True` on event-stream answers: mitmdump streaming the same SSE, no ProxAI)"
             f"{', and one with the ProxAI of another checkout (compared)' if args.compare else ''}; "
             f"log level info, flows not saved, loopback echo upstream; a streamed answer = {args.deltas} text "
             f"events (+ the protocol's framing events), a complete answer = the same text as one JSON body; "
             f"{n_req} requests for CPU ({args.rounds} interleaved rounds × {args.batch} per cell at each "
             f"concurrency), {args.latency_n} sequential requests per cell for the first-byte delay; "
             f"{os.cpu_count()}-CPU machine shared with other work. Errors: **{len(errors)}**"
             f"{'' if 'Traceback' not in logs else ', **traceback in the mitmdump log**'}."]
    summary = []
    for k in concs:
        head = ("| client, answer | CPU ms/request: translated / passed through / reference | "
                f"**translated ÷ reference** (stream budget ≤ {TARGET_TRANSLATED:.2f}) | "
                f"**passed through ÷ reference** (budget ≤ {TARGET_PASS:.2f}) |")
        rule = "|---|---|---|---|"
        if args.compare:
            head += " compared checkout: translated ÷ / passed through ÷ reference |"
            rule += "---|"
        lines += ["", f"**{k} concurrent client{'s' if k > 1 else ''}**", "", head, rule]
        for client in CLIENTS:
            for stream in (True, False):
                t, p, r = ((client, how, stream) for how in (TRANSLATED, PASSED, REF))
                row = (f"| {SHORT[client]} → {SHORT[TRANSLATE_TO[client]]}, {'stream' if stream else 'complete'} | "
                       f"{ms(k, t):.2f} / {ms(k, p):.2f} / {ms(k, r):.2f} | **{ms(k, t) / ms(k, r):.2f}** | "
                       f"**{ms(k, p) / ms(k, r):.2f}** |")
                if args.compare:
                    row += (f" {ms(k, (client, CMP_TRANSLATED, stream)) / ms(k, r):.2f} / "
                            f"{ms(k, (client, CMP_PASSED, stream)) / ms(k, r):.2f} |")
                lines.append(row)
        rs, rc = total(k, REF, True), total(k, REF, False)
        line = (f"{k} client{'s' if k > 1 else ''}: translated streams ÷ reference **{total(k, TRANSLATED, True) / rs:.2f}** "
                f"(budget ≤ {TARGET_TRANSLATED:.2f}), passed-through streams ÷ reference "
                f"**{total(k, PASSED, True) / rs:.2f}** (budget ≤ {TARGET_PASS:.2f}); complete answers: "
                f"translated {total(k, TRANSLATED, False) / rc:.2f}, passed through {total(k, PASSED, False) / rc:.2f}; "
                f"reference {rs * 1000:.2f} ms per stream, {rc * 1000:.2f} ms per complete answer")
        if args.compare:
            line += (f"; compared checkout: translated streams {total(k, CMP_TRANSLATED, True) / rs:.2f}, "
                     f"passed-through streams {total(k, CMP_PASSED, True) / rs:.2f}")
        summary.append(line + ".")
        fb = (f"{k} client{'s' if k > 1 else ''}: a route with a fallback whose own upstream answers ÷ the same "
              f"translation without one: streams **{total(k, FALLBACK, True) / total(k, TRANSLATED, True):.2f}**, "
              f"complete answers **{total(k, FALLBACK, False) / total(k, TRANSLATED, False):.2f}**")
        if args.compare:
            fb += (f"; ÷ the compared checkout's translation: streams "
                   f"**{total(k, FALLBACK, True) / total(k, CMP_TRANSLATED, True):.2f}**, complete answers "
                   f"**{total(k, FALLBACK, False) / total(k, CMP_TRANSLATED, False):.2f}**")
        summary.append(fb + ".")
    lines += [""] + [f"- {s}" for s in summary]
    stream_lat = [v for c in all_cells if c[1] == TRANSLATED and c[2] for v in lat[c]]
    lat_of = {how: [v for c in all_cells if c[1] == how and c[2] for v in lat[c]] for how in (PASSED, REF)}
    if stream_lat:
        lines.append(f"- First-byte delay of streams, median (p90) ms: translated **{med(stream_lat):.2f}** "
                     f"({q(stream_lat, 0.9):.2f}), passed through {med(lat_of[PASSED]):.2f} "
                     f"({q(lat_of[PASSED], 0.9):.2f}), reference {med(lat_of[REF]):.2f} ({q(lat_of[REF], 0.9):.2f}).")
    if errors:
        lines += ["", "Errors:", ""] + [f"- {e}" for e in errors[:20]]
    text = "\n".join(lines)
    print(text)
    if not args.no_write and not args.quick:
        write_section(ROOT / "docs" / "performance.md", "proxy",
                      "### End to end through mitmdump: translated and passed through, beside mitmdump "
                      "streaming the same answers\n\n" + text, "Performance")
        print("wrote the proxy section of docs/performance.md")


if __name__ == "__main__":
    main()
