"""Load: N concurrent translated streams (mixed directions) through one mitmdump with the addon,
against the loopback echo upstream.

    uv run python benchmarks/load.py                 # 200 streams, writes the "load" section of docs/performance.md
    uv run python benchmarks/load.py -n 50 --no-write

Each client asks for a unique token (``ECHO[<token>]``); the upstream streams back a text made of
that token (``n_deltas`` events, ``delay`` apart), in its own protocol; the addon translates it into
the client's. Every client's stream is consumed by the official SDK accumulator (tests/sdk.py) and
its text must be exactly its own echo: any other token in a stream is cross-talk. The six
translated directions are used in turn. Peak memory is the mitmdump process's VmHWM (peak RSS,
/proc), with the RSS before the run for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# keep this folder off sys.path: a script here must never shadow a library a peer imports
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from tests.proxai_mitm_faults.echo_upstream import (  # noqa: E402
    SHORT,
    Rig,
    client_path,
    echo_text,
    http_request,
    proc_stat,
    request_body,
)
from tests.sdk import accumulate_stream  # noqa: E402

from proxai_core import Protocol  # noqa: E402

PROTOS = list(SHORT)
DIRECTIONS = [(c, u) for c in PROTOS for u in PROTOS if c != u]
TOKEN_RX = re.compile(rb"L\d{4}x[0-9a-f]{8}")


def check(client: str, token: str, res, n_deltas: int) -> str | None:
    """None, or why this client's answer is wrong."""
    if res.error:
        return f"transport: {res.error}"
    if res.status != 200:
        return f"HTTP {res.status}: {res.body[:200]!r}"
    others = {t.decode() for t in TOKEN_RX.findall(res.body)} - {token}
    if others:
        return f"CROSS-TALK: tokens of other clients in this stream: {sorted(others)[:3]}"
    try:
        s = accumulate_stream(Protocol(client), res.body)
    except Exception as e:  # noqa: BLE001
        return f"SDK accumulator: {type(e).__name__}: {str(e)[:160]}"
    want = echo_text(token, n_deltas)
    if s.text != want:
        return f"text differs: {s.text[:80]!r} != {want[:80]!r}"
    return None


async def run(rig: Rig, n: int, n_deltas: int, timeout: float, stream: bool = True) -> dict:
    sem_start = asyncio.Event()
    results: list[tuple[str, str, str, object]] = []

    async def one(i: int) -> None:
        client, upstream = DIRECTIONS[i % len(DIRECTIONS)]
        token = f"L{i:04d}x{secrets.token_hex(4)}"
        body = json.dumps(request_body(client, token, stream)).encode()
        await sem_start.wait()
        res = await http_request("127.0.0.1", rig.port, client_path(client, upstream), body,
                                 {"authorization": "Bearer sk-load-client", "x-api-key": "sk-load-client"},
                                 timeout=timeout)
        results.append((client, upstream, token, res))

    tasks = [asyncio.create_task(one(i)) for i in range(n)]
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    sem_start.set()
    await asyncio.gather(*tasks)
    wall = time.monotonic() - t0
    # in flight at once: the largest number of [t_sent, t_done] intervals overlapping
    edges = []
    for *_, r in results:
        if r.t_sent and r.t_done:
            edges += [(r.t_sent, 1), (r.t_done, -1)]
    peak = cur = 0
    for _, d in sorted(edges):
        cur += d
        peak = max(peak, cur)
    return {"results": results, "wall": wall, "in_flight": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200, help="concurrent streams")
    ap.add_argument("--deltas", type=int, default=20, help="text events per stream")
    ap.add_argument("--delay", type=float, default=0.05, help="seconds between upstream events")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--save", action="store_true", help="also write flows (-w)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    out = load_run(args.n, args.deltas, args.delay, args.timeout, save=args.save)
    text = out["text"]
    print(text)
    if out["bad"]:
        print("\nErrors:")
        for line in out["bad"][:50]:
            print(" ", line)
    if not args.no_write:
        from benchmarks._common import write_section

        write_section(ROOT / "docs" / "performance.md", "load",
                      "### Load: concurrent translated streams through one mitmdump\n\n" + text, "Performance")
        print("wrote the load section of docs/performance.md")


def load_run(n: int, n_deltas: int, delay: float, timeout: float, *, save: bool = False) -> dict:
    rig = Rig(save=save, n_deltas=n_deltas, delay=delay, keep_requests=False).start()
    samples: list[float] = []
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            try:
                samples.append(proc_stat(rig.pid)["rss_mb"])
            except OSError:
                return
            time.sleep(0.05)

    try:
        # warm-up: one request per direction (imports, first connections)
        async def warm():
            for c, u in DIRECTIONS:
                await http_request("127.0.0.1", rig.port, client_path(c, u),
                                   json.dumps(request_body(c, f"W000x{secrets.token_hex(4)}", True)).encode(),
                                   {"x-api-key": "k", "authorization": "Bearer k"}, timeout=30)

        asyncio.run(warm())
        before = proc_stat(rig.pid)
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        res = asyncio.run(run(rig, n, n_deltas, timeout))
        stop.set()
        th.join(2)
        after = proc_stat(rig.pid)
        alive = rig.m.proc.poll() is None
        log = rig.m.log
    finally:
        stop.set()
        rig.close()
    bad = []
    per_dir: dict[tuple[str, str], list[float]] = {}
    for client, upstream, token, r in res["results"]:
        why = check(client, token, r, n_deltas)
        if why:
            bad.append(f"{SHORT[client]}→{SHORT[upstream]} {token}: {why}")
        elif r.t_done:
            per_dir.setdefault((client, upstream), []).append(r.t_done - r.t_sent)
    cross = sum("CROSS-TALK" in b for b in bad)
    durations = [d for v in per_dir.values() for d in v]
    stream_s = n_deltas * delay
    lines = [
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: `uv run python benchmarks/load.py -n {n}` — "
        f"{n} concurrent streams, the six translated directions in turn, {n_deltas} text events per stream "
        f"{delay * 1000:.0f} ms apart (≈ {stream_s:.1f} s of upstream pacing each), loopback echo upstream, "
        f"flows {'saved (-w)' if save else 'not saved'}; 2-CPU machine shared with other work.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| streams completed correctly (SDK accumulator, exact own text) | **{n - len(bad)} / {n}** |",
        f"| errors | **{len(bad)}** |",
        f"| cross-talk (another client's token in a stream) | **{cross}** |",
        f"| streams in flight at once (peak) | {res['in_flight']} |",
        f"| wall time for all | {res['wall']:.2f} s |",
        "| per stream, request → last byte: median / p95 / max | "
        + (f"{statistics.median(durations):.2f} / {sorted(durations)[int(len(durations) * 0.95) - 1]:.2f} / "
           f"{max(durations):.2f} s" if durations else "–") + " |",
        f"| mitmdump RSS before → peak during the run (VmHWM) | {before['rss_mb']:.0f} MB → "
        f"**{max([after['hwm_mb']] + samples):.0f} MB** (sampled max {max(samples) if samples else 0:.0f} MB) |",
        f"| mitmdump CPU for the run | {after['cpu'] - before['cpu']:.2f} s |",
        f"| mitmdump still running, traceback in its log | {'yes' if alive else '**no**'}, "
        f"{'**yes**' if 'Traceback' in log else 'no'} |",
    ]
    return {"text": "\n".join(lines), "bad": bad, "cross": cross, "n": n, "peak_mb": max([after["hwm_mb"]] + samples),
            "before_mb": before["rss_mb"], "in_flight": res["in_flight"], "alive": alive,
            "traceback": "Traceback" in log}


if __name__ == "__main__":
    main()
