"""``proxai report --html FILE``: one self-contained HTML page of a session.

The flow table, the totals per model, the sessions (per session: turns, tokens, cache-read share, cost,
stops, and the turns where its cache reads dropped, with what changed in the prefix), a timeline (per flow: waiting for the headers, time to the first
token, generation; coloured by stop reason) and each flow's conversation. No script, no external
resource (no network, no CDN): inline CSS and SVG only. Every recorded text is HTML-escaped.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from html import escape as _h
from pathlib import Path
from typing import Any

from ..flow.metrics import fmt_ms, fmt_usd
from ..flow.session import group_sessions
from ..wire.escape import escape as _ctl
from .reportfmt import COLUMNS, cells, drops_title, pct, session_cells, totals

__all__ = ["STOP_COLOURS", "render_html", "write_html"]

#: one colour per stop reason (the legend shows them)
STOP_COLOURS = {
    "end_turn": "#2e8b57",
    "tool_use": "#3b6fd8",
    "refusal": "#c0392b",
    "max_output": "#d98e04",
    "context_full": "#8e44ad",
    "paused": "#7f8c8d",
    "interrupted": "#e74c3c",
    "rejected": "#a04000",
    "other": "#95a5a6",
}
_WAIT, _TTFT = "#cfd6de", "#f2c14e"


def h(v: Any) -> str:
    """HTML-escaped text with control characters shown as escapes."""
    return _h(_ctl(v if isinstance(v, str) else str(v), multiline=True), quote=True)


def _colour(reason: str | None) -> str:
    return STOP_COLOURS.get(reason or "", "#95a5a6")


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d2733;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e3e8ee;padding-bottom:4px}
.sub{color:#5b6b7c;margin-bottom:16px}
table{border-collapse:collapse;font-size:13px}th,td{padding:4px 8px;border-bottom:1px solid #eef1f4;text-align:left;
vertical-align:top}th{background:#f6f8fa;position:sticky;top:0}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}
.stop{display:inline-block;padding:0 6px;border-radius:9px;color:#fff;font-size:12px}
.legend span{margin-right:14px;font-size:12px}.sw{display:inline-block;width:11px;height:11px;border-radius:2px;
margin-right:4px;vertical-align:-1px}
svg text{font:11px system-ui,sans-serif;fill:#1d2733}
.flow{border:1px solid #e3e8ee;border-radius:6px;margin:14px 0;padding:10px 14px}
.flow h3{font-size:15px;margin:0 0 6px}.meta{color:#5b6b7c;font-size:12px;margin-bottom:8px}
.msg{margin:6px 0;padding:6px 10px;border-left:3px solid #cfd6de;background:#fafbfc}
.role{font-weight:600;font-size:12px;text-transform:uppercase;color:#5b6b7c}
.system{border-left-color:#8e44ad}.assistant{border-left-color:#3b6fd8}.user{border-left-color:#2e8b57}
.tool{border-left-color:#d98e04}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
.refusal,.error{background:#fdecea;border-left-color:#c0392b;color:#7b1d14;font-weight:600}
.warn{color:#8a5a00;font-size:12px}details summary{cursor:pointer;color:#5b6b7c}
"""


# ----------------------------------------------------------------------------- pieces
def _legend() -> str:
    items = [f'<span><i class="sw" style="background:{_WAIT}"></i>waiting for headers</span>',
             f'<span><i class="sw" style="background:{_TTFT}"></i>headers → first token</span>']
    items += [f'<span><i class="sw" style="background:{c}"></i>generation, {h(r)}</span>'
              for r, c in STOP_COLOURS.items()]
    return '<div class="legend">' + "".join(items) + "</div>"


def _timeline(rows: Sequence[dict[str, Any]], *, aligned: bool) -> str:
    """One bar per flow. ``aligned``: every bar starts at 0 (latency breakdown); else at the flow's
    start within the session."""
    timed = [r for r in rows if r.get("timestamp") and r.get("duration_ms") is not None]
    if not timed:
        return "<p>No timings recorded.</p>"
    t0 = min(r["timestamp"] for r in timed)
    if aligned:
        span = max(r["duration_ms"] for r in timed)
    else:
        span = max((r["timestamp"] - t0) * 1000 + r["duration_ms"] for r in timed)
    span = span or 1.0
    label_w, width, row_h = 260, 1000, 18
    scale = (width - label_w - 160) / span
    height = row_h * len(timed) + 24
    parts = [f'<svg width="{width}" height="{height}" role="img" '
             f'aria-label="{"latency breakdown" if aligned else "session timeline"}">']
    for i, r in enumerate(timed):
        y = 4 + i * row_h
        base = 0.0 if aligned else (r["timestamp"] - t0) * 1000
        dur = r["duration_ms"]
        hdr = r.get("headers_ms")
        ttft = r.get("ttft_ms")
        segs = []
        wait_end = min(hdr, dur) if hdr is not None else 0.0
        if wait_end > 0:
            segs.append((0.0, wait_end, _WAIT, "waiting"))
        first = ttft if ttft is not None and ttft <= dur else None
        if first is not None and first > wait_end:
            segs.append((wait_end, first, _TTFT, "to first token"))
        gen_start = first if first is not None else wait_end
        segs.append((gen_start, dur, _colour(r.get("reason")), f"generation, {r.get('reason') or '?'}"))
        label = f"{(r.get('time') or '')[-8:]} {r.get('model') or '?'}"
        parts.append(f'<text x="0" y="{y + 12}">{h(label[:44])}</text>')
        for a, b, col, what in segs:
            x = label_w + (base + a) * scale
            w = max((b - a) * scale, 1.5)
            parts.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_h - 6}" fill="{col}">'
                         f'<title>{h(what)}: {h(fmt_ms(b - a))}</title></rect>')
        end_x = label_w + (base + dur) * scale + 4
        tip = f"TTFT {fmt_ms(ttft)} · {fmt_ms(dur)}"
        parts.append(f'<text x="{end_x:.1f}" y="{y + 12}">{h(tip)}</text>')
    axis_y = height - 6
    parts.append(f'<text x="{label_w}" y="{axis_y}">0</text>'
                 f'<text x="{width - 160}" y="{axis_y}" text-anchor="end">{h(fmt_ms(span))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(rows: Sequence[dict[str, Any]]) -> str:
    right = {"status", "tokens", "ttft", "duration", "cost"}
    head = "".join(f'<th class="{"r" if k in right else ""}">{h(t)}</th>' for k, t in COLUMNS)
    body = []
    for r in rows:
        c = cells(r)
        tds = []
        for k, _ in COLUMNS:
            if k == "stop":
                tds.append(f'<td><span class="stop" style="background:{_colour(r.get("reason"))}">'
                           f"{h(c[k])}</span></td>")
            elif k == "time":
                tds.append(f'<td><a href="#flow-{h(r.get("id") or "")}">{h(c[k])}</a></td>')
            else:
                tds.append(f'<td class="{"r" if k in right else ""}">{h(c[k])}</td>')
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f'<table id="flows"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _totals(rows: Sequence[dict[str, Any]]) -> str:
    out = ['<table id="totals"><thead><tr><th>model</th><th class="r">exchanges</th><th class="r">input</th>'
           '<th class="r">output</th><th class="r">cached</th><th class="r">reasoning</th><th class="r">cost</th>'
           "</tr></thead><tbody>"]
    for t in totals(rows):
        cost = fmt_usd(t["cost_usd"]) if t["exchanges"] > t["unpriced"] else "unknown"
        if t["unpriced"] and t["exchanges"] > t["unpriced"]:
            cost += f" + {t['unpriced']} unknown"
        known = t["untokened"] < t["exchanges"]
        inp, outp = (t["input_tokens"], t["output_tokens"]) if known else ("?", "?")
        out.append(f"<tr><td>{h(t['model'])}</td><td class=r>{t['exchanges']}</td><td class=r>{inp}</td>"
                   f"<td class=r>{outp}</td><td class=r>{t['cache_read_tokens']}</td>"
                   f"<td class=r>{t['reasoning_tokens']}</td><td class=r>{h(cost)}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _sessions(groups: Sequence[dict[str, Any]]) -> str:
    heads = ["session", "from", "turns", "tokens in→out", "cache read", "stops", "cost"]
    right = {2, 3, 4, 6}
    out = ['<table id="sessions"><thead><tr>' + "".join(f'<th class="{"r" if i in right else ""}">{h(t)}</th>'
                                                     for i, t in enumerate(heads)) + "</tr></thead><tbody>"]
    for s in groups:
        tds = "".join(f'<td class="{"r" if i in right else ""}">{h(c)}</td>' for i, c in enumerate(session_cells(s)))
        out.append(f"<tr>{tds}</tr>")
    out.append("</tbody></table>")
    drops = [(s, d) for s in groups for d in s["drops"]]
    out.append(f"<p>{h(drops_title()[:1].upper() + drops_title()[1:])}: {'none' if not drops else ''}</p>")
    if drops:
        out.append('<table id="drops"><thead><tr><th>time</th><th>session</th><th class="r">turn</th>'
                   '<th class="r">cache read</th><th class="r">before</th><th>what changed</th></tr></thead><tbody>')
        for s, d in drops:
            out.append(f'<tr><td><a href="#flow-{h(d.get("id") or "")}">{h(d.get("time") or "?")}</a></td>'
                       f'<td>{h(s["session"] or "(none)")}</td><td class=r>{d["turn"]}</td>'
                       f'<td class=r>{h(pct(d["cache_read_share"]))}</td><td class=r>{h(pct(d["running_share"]))}</td>'
                       f'<td>{h("; ".join(d["changed"]))}</td></tr>')
        out.append("</tbody></table>")
    return "".join(out)


def _drop_note(d: dict[str, Any] | None) -> str:
    if d is None:
        return ""
    return (f'<div class="msg error">⚠ cache read dropped to {h(pct(d["cache_read_share"]))} of the input (the '
            f'conversation\'s running share {h(pct(d["running_share"]))}): {h("; ".join(d["changed"]))}</div>')


def _json_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    return json.dumps(v, indent=2, ensure_ascii=False)


def _part(p: dict[str, Any]) -> str:
    t = p.get("type")
    if t == "text":
        return f"<pre>{h(p.get('text', ''))}</pre>"
    if t == "refusal":
        return f'<div class="msg refusal">⛔ REFUSAL: {h(p.get("text", ""))}</div>'
    if t == "tool_call":
        return (f'<div class="msg tool"><span class="role">tool call</span> <b>{h(p.get("name", "?"))}</b> '
                f'<small>{h(p.get("id") or "")}</small><pre>{h(_json_text(p.get("arguments")))}</pre></div>')
    if t == "tool_result":
        inner = "".join(_part(c) for c in p.get("content") or [])
        err = " (error)" if p.get("is_error") else ""
        return (f'<div class="msg tool"><span class="role">tool result{err}</span> '
                f'<small>{h(p.get("call_id") or "")}</small>{inner}</div>')
    if t == "reasoning":
        text = p.get("text") or ("(redacted)" if p.get("redacted") else "(no visible text)")
        return f"<details><summary>reasoning</summary><pre>{h(text)}</pre></details>"
    return f"<pre>[{h(t or 'part')}] {h(_json_text({k: v for k, v in p.items() if k != 'type'}))}</pre>"


def _conversation(ex: dict[str, Any] | None, row: dict[str, Any], drop: dict[str, Any] | None = None) -> str:
    fid = row.get("id") or ""
    c = cells(row)
    out = [f'<section class="flow" id="flow-{h(fid)}"><h3>{h(c["time"])} · {h(c["protocols"])} · {h(c["model"])}'
           f' <span class="stop" style="background:{_colour(row.get("reason"))}">{h(c["stop"])}</span></h3>']
    meta = [f"status {c['status']}", f"tokens {c['tokens']}", f"TTFT {c['ttft']}", f"duration {c['duration']}",
            f"cost {c['cost']}"]
    if row.get("output_tps"):
        meta.append(f"{row['output_tps']} tok/s")
    if row.get("route"):
        meta.append(f"route {row['route']}")
    if row.get("session"):
        meta.append(f"session {row['session']}")
    out.append(f'<div class="meta">{h(" · ".join(meta))} · flow {h(fid)}</div>')
    out.append(_drop_note(drop))
    if len(row.get("attempts") or ()) > 1:
        out.append(f'<div class="meta">attempts: {h(c["attempts"])}</div>')
    if row.get("message"):
        out.append(f'<div class="msg {"refusal" if row.get("reason") == "refusal" else "error"}">'
                   f"{h(row['message'])}</div>")
    if ex is None:
        out.append("<p>(no exchange)</p></section>")
        return "".join(out)
    req = ex.get("request") or {}
    if req.get("system"):
        out.append(f'<div class="msg system"><div class="role">system</div><pre>{h(req["system"])}</pre></div>')
    if req.get("tools"):
        out.append(f'<div class="meta">tools: {h(", ".join(map(str, req["tools"])))}</div>')
    for m in req.get("messages") or []:
        role = str(m.get("role") or "?")
        body = "".join(_part(p) for p in m.get("content") or [])
        out.append(f'<div class="msg {h(role)}"><div class="role">{h(role)}</div>{body}</div>')
    resp = ex.get("response")
    if isinstance(resp, dict) and resp.get("error"):
        e = resp["error"]
        out.append(f'<div class="msg error">⚠ ERROR {h(e.get("status") or "")} {h(e.get("kind") or "")}: '
                   f'{h(e.get("message") or "")}</div>')
    elif isinstance(resp, dict):
        body = "".join(_part(p) for p in resp.get("parts") or [])
        out.append(f'<div class="msg assistant"><div class="role">assistant · {h(resp.get("model") or "")}</div>'
                   f"{body or '<pre>(no content)</pre>'}</div>")
    elif ex.get("error"):
        out.append(f'<div class="msg error">⚠ {h(ex["error"])}</div>')
    for w in ex.get("warnings") or []:
        out.append(f'<div class="warn">warning: {h(w)}</div>')
    out.append("</section>")
    return "".join(out)


# ----------------------------------------------------------------------------- page
def render_html(flows: Sequence[Any], rows: Sequence[dict[str, Any]], *, title: str = "ProxAI report") -> str:
    from .report import exchange

    by_id = {getattr(f, "id", None): f for f in flows}
    known = [r["cost_usd"] for r in rows if r.get("cost_usd") is not None]
    unknown = sum(1 for r in rows if r.get("cost_usd") is None)
    total = fmt_usd(sum(known)) if known else "unknown"
    if known and unknown:
        total += f" (+ {unknown} unknown)"
    reasons: dict[str, int] = {}
    for r in rows:
        reasons[r.get("reason") or "?"] = reasons.get(r.get("reason") or "?", 0) + 1
    when = _dt.datetime.now().isoformat(sep=" ", timespec="seconds")
    groups = group_sessions(rows)
    drops = {d["id"]: d for s in groups for d in s["drops"]}
    convs = []
    for r in rows:
        f = by_id.get(r.get("id"))
        try:
            ex = exchange(f) if f is not None else None
        except Exception as e:  # noqa: BLE001 - one odd flow must not lose the page
            ex = {"warnings": [f"could not read this exchange: {e}"]}
        convs.append(_conversation(ex, r, drops.get(r.get("id"))))
    summary = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
        'img-src data:">',
        f"<title>{h(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{h(title)}</h1><div class=sub>{len(rows)} exchange(s) · {h(summary)} · total cost {h(total)}"
        f" · generated {h(when)}</div>",
        "<h2>Exchanges</h2>", _table(rows),
        "<h2>Totals per model</h2>", _totals(rows),
        "<h2>Sessions</h2>", _sessions(groups),
        "<h2>Session timeline</h2>", _legend(), _timeline(rows, aligned=False),
        "<h2>Latency breakdown</h2>", _timeline(rows, aligned=True),
        "<h2>Conversations</h2>", *convs,
        "</body></html>\n",
    ])


def write_html(flows: Sequence[Any], rows: Sequence[dict[str, Any]], path: str | Path) -> int:
    """Write the page; returns the number of exchanges in it."""
    Path(path).expanduser().write_text(render_html(flows, rows), encoding="utf-8")
    return len(rows)
