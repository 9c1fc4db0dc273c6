"""Where ProxAI's CPU per request goes through mitmdump, beside the budget: the whole addon, the floor
any stream observer pays, and each part of ProxAI's own work.

    uv run python benchmarks/proxy_parts.py                  # writes the "proxy-parts" section of docs/performance.md
    uv run python benchmarks/proxy_parts.py --rounds 4 --reps 500 --no-write

**Through mitmdump** (side by side, cells interleaved batch by batch and rotated each round; the same
loopback echo upstream and Chat client as ``benchmarks/proxy.py``: a stream of ``--deltas`` text
events, passed through to a Chat upstream and translated from an Anthropic upstream):

- **reference**: mitmdump streaming the same SSE with no ProxAI (the budget's denominator);
- **floor**: a stream callable that does what any observer of a stream must at least do — note each
  chunk's arrival time, keep a copy, hand the copy to the flow at the end — and nothing else;
- **ProxAI**, whole, with its garbage-collector time counted by ``gc.callbacks`` (a small second
  script in the same mitmdump);
- **ProxAI, log line ×11**: the same addon writing its one INFO line eleven times per flow, so that
  one line's cost through mitmproxy's logging (its terminal handler, its ``add_log`` event to every
  addon) is measured as (×11 − whole) ÷ 10, well above the noise of a single line;
- **ProxAI, hooks timed**: the same addon with each addon's hook and the stream callable timed where they
  run (the event loop's time in them: what they cost inside mitmproxy, with cold caches and the
  collections they trigger, which no in-process loop shows); its own CPU is not compared;
- with ``--compare DIR``, the ProxAI of another checkout (``DIR/src``), its collector time too.

**In this process** (no network, no scheduling by mitmproxy; the machine's speed still drifts about
±10 % between runs, the parts' shares stay): the same flows driven through the addon chain as
mitmproxy drives them (``tests/proxai_mitm/chain.py``: the client's request, the upstream's response
head and the upstream's chunks as the echo upstream writes them), CPU per flow of each hook and of
the stream callable, the exchange's own share of the callable split out.

Ratios and differences are medians over the rounds of each round's own ratio (the cells of a round
run back to back): on this shared 2-CPU machine two identical reference cells differ by up to 10 %
in one run, and a batch that holds a full garbage collection stands out. Budget: translated ≤ 1.20 ×
reference, passed through ≤ 1.10 × (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # no script here may shadow a library
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from benchmarks._common import write_section  # noqa: E402
from benchmarks._parts_timing import EXCHANGE, time_parts  # noqa: E402
from benchmarks.proxy import SSE_ONLY_SCRIPT, cpu_seconds  # noqa: E402
from tests.proxai_mitm_faults.echo_upstream import (  # noqa: E402
    UPSTREAM_KEY,
    UPSTREAM_KEY_ENV,
    Rig,
    build_reply,
    client_path,
    echo_text,
    http_request,
    request_body,
    routes_toml,
)

CHAT, ANTH = "openai_chat_completions", "anthropic_messages"
HEADERS = {"authorization": "Bearer sk-bench-client", "x-api-key": "sk-bench-client"}
CELLS = ("passed", "translated")
REF, FLOOR, WHOLE, LOG11, CMP, TIMED = ("reference", "floor", "ProxAI", "ProxAI, log line ×11", "compared",
                                        "ProxAI, hooks timed")

FLOOR_SCRIPT = """
import time

class Copy:
    __slots__ = ("parts", "times")

    def __init__(self):
        self.parts, self.times = [], []

    def __call__(self, data):
        if data:
            self.times.append((time.monotonic(), len(data)))
            self.parts.append(data)
        return data

class Floor:
    def responseheaders(self, flow):
        if "text/event-stream" in flow.response.headers.get("content-type", ""):
            flow.response.stream = Copy()

    def response(self, flow):
        s = flow.response.stream
        if isinstance(s, Copy):
            flow.response.raw_content = b"".join(s.parts)
            flow.metadata["chunks"] = len(s.times)

addons = [Floor()]
"""

#: the collector's time in a mitmdump (``gc.callbacks``), written to the file ``GC_OUT`` every 50 flows
GC_TIMING = """
import gc, json, time
_gc = {"t": 0.0, "t0": 0.0}

def _timed(phase, info):
    if phase == "start":
        _gc["t0"] = time.perf_counter()
    else:
        _gc["t"] += time.perf_counter() - _gc["t0"]

gc.callbacks.append(_timed)

class GcTime:
    flows = 0

    def response(self, flow):
        GcTime.flows += 1
        if GcTime.flows % 50 == 0:
            with open(GC_OUT, "w") as f:
                json.dump({"flows": GcTime.flows, "gc_s": _gc["t"]}, f)
"""
#: ProxAI of the checkout ``SRC``, a patch applied first (``PATCH``), and the collector's time
PROXAI_SCRIPT = """
import sys
sys.path.insert(0, SRC)
from proxai_mitm.addon import ProxAI
exec(PATCH)
exec(GC_TIMING)
addons = [ProxAI(), GcTime()]
"""
#: ProxAI with each addon's hook and the stream callable timed where they run, inside mitmdump (wall
#: time of the event loop's thread, ``perf_counter``: about 0.1 µs a reading), the totals written to
#: ``HOOKS_OUT`` after every flow (this mitmdump's own CPU is not compared)
TIMED_SCRIPT = """
import collections, json, sys
sys.path[:0] = [SRC, ROOT]
from proxai_mitm.addon import ProxAI
from benchmarks._parts_timing import time_parts
spent = collections.Counter()
time_parts(spent)

class Totals:
    flows = 0

    def response(self, flow):
        Totals.flows += 1
        with open(HOOKS_OUT, "w") as f:
            json.dump({"flows": Totals.flows, "spent": spent}, f)

addons = [ProxAI(), Totals()]
"""
LOG11_PATCH = """
from proxai_mitm.addons import annotate
_line = annotate.log_line

def _eleven(flow, state):
    for _ in range(11):
        _line(flow, state)

annotate.log_line = _eleven
"""
#: the reference, and the collector's time
REF_SCRIPT = SSE_ONLY_SCRIPT.replace("addons = [StreamEventStreams()]",
                                     "exec(GC_TIMING)\naddons = [StreamEventStreams(), GcTime()]")


def script(body: str, **names: str) -> str:
    """A mitmdump script: ``names`` bound first (``GC_TIMING`` always), then ``body``."""
    head = "".join(f"{k} = {v!r}\n" for k, v in {"GC_TIMING": GC_TIMING, **names}.items())
    return head + body


# ----------------------------------------------------------------------------- through mitmdump
async def batch(port: int, path: str, n: int, conc: int, tag: str, deltas: int) -> list[str]:
    """``n`` streamed Chat requests, ``conc`` at a time; the errors (wrong status or text)."""
    sem = asyncio.Semaphore(conc)
    errors: list[str] = []

    async def one(i: int) -> None:
        tok = f"{tag}_{i}"
        body = json.dumps(request_body(CHAT, tok, True)).encode()
        async with sem:
            r = await http_request("127.0.0.1", port, path, body, HEADERS, timeout=30)
        if r.error or r.status != 200:
            errors.append(f"{r.status} {r.error} {r.body[:120]!r}")
        elif echo_text(tok, deltas).split(":")[0].encode() not in r.body:
            errors.append("wrong text")

    await asyncio.gather(*(one(i) for i in range(n)))
    return errors


def through_mitmdump(args: argparse.Namespace, concs: list[int], tmp: Path) -> dict[str, Any]:
    gc_files = {name: tmp / f"gc-{i}.json" for i, name in enumerate((REF, WHOLE, LOG11, CMP))}
    if not args.compare:
        del gc_files[CMP]
    src = str(ROOT / "src")
    scripts = {
        REF: script(REF_SCRIPT, GC_OUT=str(gc_files[REF])),
        FLOOR: FLOOR_SCRIPT,
        WHOLE: script(PROXAI_SCRIPT, SRC=src, PATCH="", GC_OUT=str(gc_files[WHOLE])),
        LOG11: script(PROXAI_SCRIPT, SRC=src, PATCH=LOG11_PATCH, GC_OUT=str(gc_files[LOG11])),
    }
    if args.compare:
        scripts[CMP] = script(PROXAI_SCRIPT, SRC=str(args.compare.resolve() / "src"), PATCH="",
                              GC_OUT=str(gc_files[CMP]))
    hooks_file = tmp / "hooks.json"
    scripts[TIMED] = script(TIMED_SCRIPT, SRC=src, ROOT=str(ROOT), HOOKS_OUT=str(hooks_file))
    rigs: dict[str, Rig] = {}
    errors: list[str] = []
    cpu: dict[tuple[str, str, int], float] = collections.defaultdict(float)
    count: dict[tuple[str, str, int], int] = collections.defaultdict(int)
    #: ms per request of each batch, round by round (ratios are taken within a round: the machine's
    #: speed drifts between rounds, and a batch with a full collection in it stands out)
    rounds: dict[tuple[str, str, int], list[float]] = collections.defaultdict(list)
    #: the timed mitmdump: seconds per part and flows, per cell (read before and after each batch)
    in_situ: dict[str, collections.Counter[str]] = {c: collections.Counter() for c in CELLS}
    in_situ_flows: collections.Counter[str] = collections.Counter()

    def totals() -> tuple[int, dict[str, float]]:
        if not hooks_file.exists():
            return 0, {}
        d = json.loads(hooks_file.read_text())
        return d["flows"], d["spent"]

    try:
        for name, text in scripts.items():
            path = tmp / f"v{len(rigs)}.py"
            path.write_text(text)
            rig = Rig(save=False, n_deltas=args.deltas, keep_requests=False)
            rig.m.addon = path
            rigs[name] = rig.start()
        names = list(rigs)

        def path_of(name: str, cell: str) -> str:
            routed = cell == "translated" and name not in (REF, FLOOR)  # those two have no routes
            return client_path(CHAT, ANTH if routed else None)

        for name in names:  # warm-up (the price database loads on the first LLM flow)
            for cell in CELLS:
                errors += asyncio.run(batch(rigs[name].port, path_of(name, cell), 10, 2, "w", args.deltas))
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[: rnd % len(names)]
            for k in concs:
                for cell in CELLS:
                    for name in order:
                        pid = rigs[name].pid
                        before = totals() if name == TIMED else None
                        s0 = cpu_seconds(pid)
                        errs = asyncio.run(batch(rigs[name].port, path_of(name, cell), args.batch, k,
                                                 f"r{rnd}k{k}{cell[0]}", args.deltas))
                        time.sleep(0.05)  # let the proxy finish annotating/logging the last flows
                        spent = cpu_seconds(pid) - s0
                        cpu[name, cell, k] += spent
                        count[name, cell, k] += args.batch
                        rounds[name, cell, k].append(1000 * spent / args.batch)
                        if before is not None:
                            (n0, t0), (n1, t1) = before, totals()
                            in_situ_flows[cell] += n1 - n0
                            in_situ[cell].update({part: v - t0.get(part, 0.0) for part, v in t1.items()})
                        errors += [f"{name}, {cell}: {e}" for e in errs]
        time.sleep(0.2)
        gc_ms = {}
        for name, f in gc_files.items():
            d = json.loads(f.read_text()) if f.exists() else None
            gc_ms[name] = 1000 * d["gc_s"] / d["flows"] if d else float("nan")
        logs = "".join(r.m.log for r in rigs.values())
    finally:
        for r in rigs.values():
            r.close()
    ms = {key: 1000 * cpu[key] / count[key] for key in cpu}
    compared = ""
    if args.compare:
        import subprocess

        compared = subprocess.run(["git", "-C", str(args.compare), "log", "-1", "--format=%h"],
                                  capture_output=True, text=True).stdout.strip() or "unknown commit"
    hooks = {c: {part: 1e6 * v / in_situ_flows[c] for part, v in in_situ[c].items()} for c in CELLS
             if in_situ_flows[c]}
    return {"ms": ms, "rounds": rounds, "hooks": hooks, "gc_ms": gc_ms, "errors": errors, "traceback": "Traceback" in logs,
            "requests": sum(count.values()), "compared": compared}


# ----------------------------------------------------------------------------- in this process
def in_process(args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, float]]:
    """CPU µs per flow of each hook of the addon chain (and of the stream callable, the exchange's
    share split out), flows driven in this process as mitmproxy drives them."""
    from tests.proxai_mitm.chain import chain

    routes = tmp / "routes.toml"
    routes.write_text(routes_toml("http://127.0.0.1:9"))
    os.environ[UPSTREAM_KEY_ENV] = UPSTREAM_KEY
    spent: collections.Counter[str] = collections.Counter()
    undo = time_parts(spent, exchange=True)
    out: dict[str, dict[str, float]] = {}
    try:
        with chain() as c:
            c.configure(proxai_config=str(routes))
            for cell in CELLS:
                up = ANTH if cell == "translated" else CHAT
                path = client_path(CHAT, ANTH if cell == "translated" else None).encode()
                chunks, ctype = build_reply(up, "tok_1", args.deltas, True)

                for i in range(50):  # warm-up: the price database, caches of the interpreter
                    _drive(c, path, chunks, ctype, i)
                gc.collect()
                spent.clear()
                for i in range(args.reps):
                    _drive(c, path, chunks, ctype, i)
                out[cell] = {k: 1e6 * v / args.reps for k, v in spent.items()}
    finally:
        undo()
    return out


def _drive(c: Any, path: bytes, chunks: list[bytes], ctype: str, i: int) -> None:
    """One flow through the addon chain, hook by hook as mitmproxy calls them."""
    from mitmproxy import http
    from mitmproxy.test import tflow, tutils

    body = json.dumps(request_body(CHAT, f"tok_{i}", True)).encode()
    req = tutils.treq(method=b"POST", scheme=b"http", host=b"127.0.0.1", port=9, path=path, content=body,
                      headers=http.Headers([(b"content-type", b"application/json"),
                                            (b"authorization", b"Bearer sk-bench-client"),
                                            (b"host", b"127.0.0.1:9")]))
    f = tflow.tflow(req=req)
    f.response = None
    c.run(c.requestheaders(f))
    c.run(c.request(f))
    f.response = tutils.tresp(status_code=200, headers=http.Headers([(b"content-type", ctype.encode())]),
                              content=b"")
    c.run(c.responseheaders(f))
    for ch in chunks:
        f.response.stream(ch)
    f.response.stream(b"")
    c.run(c.response(f))


# ----------------------------------------------------------------------------- report
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deltas", type=int, default=40, help="text events per streamed answer")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--batch", type=int, default=60, help="requests per cell per round (through mitmdump)")
    ap.add_argument("--conc", default="20,1", help="client concurrencies, comma-separated")
    ap.add_argument("--reps", type=int, default=2000, help="flows per cell in this process")
    ap.add_argument("--compare", type=Path, help="a checkout whose src/ ProxAI also runs, side by side")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    concs = [int(c) for c in args.conc.split(",")]
    with tempfile.TemporaryDirectory(prefix="proxai-parts-") as d:
        tm = through_mitmdump(args, concs, Path(d))
        ip = in_process(args, Path(d))
    ms, gc_ms, per_round = tm["ms"], tm["gc_ms"], tm["rounds"]

    def rel(name: str, c: str, k: int) -> float:
        """The median over rounds of ``name``'s CPU per request ÷ the reference's in the same round."""
        return statistics.median(a / b for a, b in zip(per_round[name, c, k], per_round[REF, c, k], strict=True))

    def diff_us(a: str, b: str, c: str, k: int, per: float = 1.0) -> float:
        """The median over rounds of (``a`` − ``b``) µs per request, ÷ ``per``."""
        return statistics.median(1000 * (x - y) / per
                                 for x, y in zip(per_round[a, c, k], per_round[b, c, k], strict=True))

    budget = {"passed": 1.10, "translated": 1.20}
    cols = [(cell, k) for k in concs for cell in CELLS]
    head = " | ".join(f"{cell}, {k} client{'s' if k > 1 else ''}" for cell, k in cols)
    lines = [
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: `uv run python benchmarks/proxy_parts.py"
        f"{f' --rounds {args.rounds}' if args.rounds != 12 else ''}"
        f"{f' --compare {args.compare.name}' if args.compare else ''}` — a Chat client streaming {args.deltas} text "
        f"events, passed through (Chat upstream) and translated (Anthropic upstream; the reference and the floor "
        f"stream the Chat answer as it is). Through mitmdump: {5 + bool(args.compare)} mitmdumps side by side "
        f"(reverse mode, log level info, flows not saved), {tm['requests']} requests, {args.rounds} rounds × {args.batch} per cell; in "
        f"this process: {args.reps} flows per cell; {os.cpu_count()}-CPU machine shared with other work. "
        f"Errors: **{len(tm['errors'])}**{', **traceback in a mitmdump log**' if tm['traceback'] else ''}.",
        "", "**Through mitmdump**, CPU per streamed request", "", f"| | {head} |", "|---|" + "---|" * len(cols)]

    def row(label: str, fn: Callable[[str, int], str]) -> None:
        lines.append(f"| {label} | " + " | ".join(fn(cell, k) for cell, k in cols) + " |")

    row("reference: mitmdump streaming, no ProxAI", lambda c, k: f"{ms[REF, c, k]:.2f} ms")
    row("the budget: ProxAI may add", lambda c, k: f"{(budget[c] - 1) * ms[REF, c, k] * 1000:.0f} µs "
        f"(≤ {budget[c]:.2f}×)")
    row("floor: a callable keeping a timed copy, ÷ reference", lambda c, k: f"{rel(FLOOR, c, k):.2f}")
    row("**ProxAI ÷ reference**", lambda c, k: f"**{rel(WHOLE, c, k):.2f}**")
    row("ProxAI adds", lambda c, k: f"{diff_us(WHOLE, REF, c, k):.0f} µs")
    row("of which one log line (×11 run)", lambda c, k: f"{diff_us(LOG11, WHOLE, c, k, per=10):.0f} µs")
    if args.compare:
        row(f"the compared checkout ({tm['compared']}) ÷ reference",
            lambda c, k: f"{rel(CMP, c, k):.2f}")
    lines += ["", f"Garbage collector, ms per flow over the whole run (every cell): reference {gc_ms[REF]:.3f}, "
                  f"ProxAI {gc_ms[WHOLE]:.3f} (its start-up heap frozen: `addons/heap.py`)"
                  + (f", the compared checkout {gc_ms[CMP]:.3f}." if args.compare else ".")]
    situ = tm["hooks"]
    names = sorted({k for cell in (*ip.values(), *situ.values()) for k in cell if k != EXCHANGE},
                   key=lambda k: -max([ip[c].get(k, 0.0) for c in ip] + [situ[c].get(k, 0.0) for c in situ]))
    names.insert(names.index("stream callable") + 1, EXCHANGE)  # its share, under it
    lines += ["", "**ProxAI's parts**, µs per flow: in this process (CPU time, the flows driven through the addon "
              "chain as mitmproxy drives them), and inside mitmdump (the event loop's time in each hook of the "
              "timed mitmdump, during the same run; it also holds what the hook makes the collector do)", "",
              "| part | " + " | ".join(f"in this process, {c}" for c in CELLS) + " | "
              + " | ".join(f"inside mitmdump, {c}" for c in CELLS) + " |",
              "|---|" + "---|" * (2 * len(CELLS))]

    def cell(table: dict[str, dict[str, float]], c: str, name: str) -> str:
        v = table.get(c, {}).get(name)
        return "–" if v is None else f"{v:.0f}"

    for name in names:
        lines.append(f"| {name.replace('  ', '— ')} | " + " | ".join(cell(ip, c, name) for c in CELLS) + " | "
                     + " | ".join(cell(situ, c, name) for c in CELLS) + " |")
    total = {c: sum(v for k, v in ip[c].items() if not k.startswith("  ")) for c in CELLS}
    total_situ = {c: sum(situ[c].values()) for c in situ}
    lines.append("| **all hooks and the stream callable** | " + " | ".join(f"**{total[c]:.0f}**" for c in CELLS)
                 + " | " + " | ".join(f"**{total_situ[c]:.0f}**" if c in total_situ else "–" for c in CELLS) + " |")
    if tm["errors"]:
        lines += ["", "Errors:", ""] + [f"- {e}" for e in tm["errors"][:20]]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section(ROOT / "docs" / "performance.md", "proxy-parts",
                      "### Where the CPU goes: the whole, the floor, the parts\n\n" + text, "Performance")
        print("wrote the proxy-parts section of docs/performance.md")


if __name__ == "__main__":
    main()
