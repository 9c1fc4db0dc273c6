"""Report output: filters, totals per model, and the formats (table, JSON, CSV, Markdown); the same per
session (``--by session``: :func:`format_sessions`).

Works on the row dicts of :func:`proxai_mitm.reporting.report.rows` (it never imports report.py). Everything
meant for a terminal (table) has its control characters escaped; JSON and CSV carry the values as
recorded, JSON as ASCII escapes, CSV with control characters escaped and text cells that a spreadsheet
would run as a formula prefixed with ``'``; Markdown cells have ``& < > |`` escaped as well.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..flow.metrics import fmt_ms, fmt_usd
from ..flow.session import DROP_POINTS, group_sessions
from ..wire.escape import escape
from ..wire.protocols import SHORT

__all__ = ["FORMATS", "filter_rows", "format_rows", "format_sessions", "select_flows", "table", "totals"]

FORMATS = ("table", "json", "csv", "markdown")

#: (key, heading) of the HTML / Markdown columns
COLUMNS = (
    ("time", "time"),
    ("protocols", "client → upstream"),
    ("model", "model"),
    ("status", "status"),
    ("stop", "stop"),
    ("tokens", "tokens in→out"),
    ("ttft", "TTFT"),
    ("duration", "duration"),
    ("cost", "cost"),
)
#: the terminal table's shorter headings (same columns)
_TABLE_HEADS = {"protocols": "api", "status": "HTTP", "tokens": "in→out"}
_RIGHT = {"status", "tokens", "ttft", "duration", "cost"}
#: protocol names in the terminal table (chat→anth)
_ABBREV = {"responses": "resp", "anthropic": "anth", "gemini": "gem"}
#: the default width of the terminal table, and the narrowest a shortened column gets
WIDTH = 120
_MIN_MODEL, _MID_STOP, _MIN_STOP = 18, 18, 11
#: the fields of a JSON / CSV row, in order
FIELDS = ("time", "timestamp", "id", "client_protocol", "upstream_protocol", "route", "model", "response_model",
          "status", "reason", "category", "message", "input_tokens", "output_tokens", "cache_read_tokens",
          "cache_write_tokens", "reasoning_tokens", "headers_ms", "ttft_ms", "duration_ms", "output_tps",
          "cost_usd", "cost_note", "path", "session")


# ----------------------------------------------------------------------------- selection
def select_flows(flows: Iterable[Any], expr: str | None) -> list[Any]:
    """The flows matching a mitmproxy filter expression (``~d api.openai.com & ~c 200``)."""
    flows = list(flows)
    if not expr:
        return flows
    from mitmproxy import flowfilter

    try:
        match = flowfilter.parse(expr)
    except ValueError as e:
        raise ValueError(f"bad filter expression {expr!r}: {e}") from e
    return [f for f in flows if match(f)]


def _csv_set(values: Sequence[str] | str | None) -> set[str]:
    if not values:
        return set()
    if isinstance(values, str):
        values = [values]
    return {v.strip().lower() for item in values for v in item.split(",") if v.strip()}


def filter_rows(rows: Iterable[dict[str, Any]], *, stop: Sequence[str] | str | None = None,
                model: str | None = None, route: Sequence[str] | str | None = None) -> list[dict[str, Any]]:
    """Rows whose stop reason is one of ``stop`` (comma lists allowed), whose model (asked or answered)
    contains ``model`` (case-insensitive), and whose route is one of ``route`` (``-``: no route)."""
    stops, routes = _csv_set(stop), _csv_set(route)
    needle = (model or "").lower()
    out = []
    for r in rows:
        if stops and (r.get("reason") or "unknown").lower() not in stops:
            continue
        if needle and needle not in f"{r.get('model') or ''} {r.get('response_model') or ''}".lower():
            continue
        if routes and (r.get("route") or "-").lower() not in routes:
            continue
        out.append(r)
    return out


# ----------------------------------------------------------------------------- totals
def totals(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model (the model that answered, else the one asked for): exchanges, tokens, cost. Tokens and
    cost sum the known values; ``untokened`` / ``unpriced`` count the exchanges whose counts / price are
    unknown."""
    acc: dict[str, dict[str, Any]] = {}
    for r in rows:
        name = r.get("response_model") or r.get("model") or "?"
        t = acc.setdefault(name, {"model": name, "exchanges": 0, "input_tokens": 0, "output_tokens": 0,
                                  "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0,
                                  "cost_usd": 0.0, "unpriced": 0, "untokened": 0})
        t["exchanges"] += 1
        if r.get("input_tokens") is None and r.get("output_tokens") is None:
            t["untokened"] += 1
        for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"):
            t[k] += r.get(k) or 0
        if r.get("cost_usd") is None:
            t["unpriced"] += 1
        else:
            t["cost_usd"] += r["cost_usd"]
    out = sorted(acc.values(), key=lambda t: (-t["cost_usd"], t["model"]))
    for t in out:
        t["cost_usd"] = round(t["cost_usd"], 8)
    return out


# ----------------------------------------------------------------------------- cells
def _short(p: str | None) -> str:
    for proto, short in SHORT.items():
        if proto.value == p:
            return short
    return p or "?"


def _tok(v: Any) -> str:
    return "?" if v is None else str(v)


def model_label(r: dict[str, Any]) -> str:
    """The model asked for, then the one that answered: ``gpt-4o-2024-08-06`` when the answer names a
    version of the asked model, ``gpt-5 → claude-x`` when it is another one."""
    asked, answered = r.get("model") or "", r.get("response_model") or ""
    if not answered or answered in asked:
        return asked or "?"
    head, sep, last = asked.rpartition(" → ")  # a route's mapping: the model sent is the last one
    if last and answered.startswith(last):
        return head + sep + answered
    return f"{asked} → {answered}" if asked else answered


def cells(r: dict[str, Any], *, compact: bool = False) -> dict[str, str]:
    """The display text of one row's columns (not escaped). ``compact``: for the terminal table (time
    without the year, abbreviated protocols, no cache count)."""
    a, b = _short(r.get("client_protocol")), _short(r.get("upstream_protocol"))
    if compact:
        a, b = _ABBREV.get(a, a), _ABBREV.get(b, b)
    stop = r.get("reason") or "?"
    if r.get("category") and r["category"] != r.get("reason"):
        stop += f" ({r['category']})"
    if r.get("fallback"):
        stop += f" via {r['fallback']}"
    tokens = f"{_tok(r.get('input_tokens'))}→{_tok(r.get('output_tokens'))}"
    if r.get("cache_read_tokens") and not compact:
        tokens += f" (cached {r['cache_read_tokens']})"
    time = r.get("time") or "?"
    if compact and len(time) == 19 and time[4] == "-":
        time = time[5:]  # 2026-12-02 14:06:08 -> 12-02 14:06:08
    return {
        "time": time,
        "protocols": a if a == b else f"{a}→{b}" if compact else f"{a} → {b}",
        "model": model_label(r),
        "status": "-" if r.get("status") is None else str(r["status"]),
        "stop": stop,
        "tokens": tokens,
        "ttft": fmt_ms(r.get("ttft_ms")),
        "duration": fmt_ms(r.get("duration_ms")),
        "cost": "unknown" if r.get("cost_usd") is None else fmt_usd(r["cost_usd"]),
        "attempts": " → ".join(f"{a.get('upstream')} {a.get('status') or a.get('reason')}"
                               for a in r.get("attempts") or ()),
    }


def _total_cells(t: dict[str, Any]) -> list[str]:
    cost = fmt_usd(t["cost_usd"]) if t["exchanges"] > t["unpriced"] else "unknown"
    if t["unpriced"] and t["exchanges"] > t["unpriced"]:
        cost += f" + {t['unpriced']} unknown"
    tokens = f"{t['input_tokens']}→{t['output_tokens']}" if t["untokened"] < t["exchanges"] else "?→?"
    return [t["model"], str(t["exchanges"]), tokens, str(t["cache_read_tokens"]), str(t["reasoning_tokens"]), cost]


_TOTAL_HEADS = ["model", "exchanges", "tokens in→out", "cached", "reasoning", "cost"]


# ----------------------------------------------------------------------------- formats
def _aligned(heads: list[str], body: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(heads[i]), *(len(c[i]) for c in body)) if body else len(heads[i]) for i in range(len(heads))]

    def fmt(vals: list[str]) -> str:
        return "  ".join(v.rjust(widths[i]) if i in right else v.ljust(widths[i])
                         for i, v in enumerate(vals)).rstrip()

    return [fmt(heads), "  ".join("-" * w for w in widths), *(fmt(c) for c in body)]


def _fit(heads: list[str], body: list[list[str]], width: int, shrink: Sequence[tuple[int, int, bool]]) -> None:
    """Shorten columns in place until a line fits ``width``: each (column, narrowest, keep_end) in turn;
    a cut cell shows ``…`` where text was dropped (``keep_end``: its end stays, as a model's version)."""
    if width <= 0 or not body:
        return
    widths = [max(len(heads[i]), *(len(c[i]) for c in body)) for i in range(len(heads))]
    over = sum(widths) + 2 * (len(widths) - 1) - width
    for col, narrowest, keep_end in shrink:
        if over <= 0:
            return
        w = min(widths[col], max(narrowest, len(heads[col]), widths[col] - over))
        over -= widths[col] - w
        widths[col] = w
        for c in body:
            if len(c[col]) > w:
                c[col] = "…" + c[col][len(c[col]) - w + 1:] if keep_end else c[col][:w - 1] + "…"


def table(rows: Sequence[dict[str, Any]], *, width: int = WIDTH) -> str:
    """An aligned plain-text table, a line of stop reasons and the totals per model (escaped), at most
    ``width`` columns wide when it can be (0: no limit): the stop and model columns are shortened."""
    if not rows:
        return "no LLM flows"
    keys = [k for k, _ in COLUMNS]
    heads = [_TABLE_HEADS.get(k, h) for k, h in COLUMNS]
    body = [[escape(c[k]) for k in keys] for c in (cells(r, compact=True) for r in rows)]
    model, stop = keys.index("model"), keys.index("stop")
    # the stop column gives some room first: the model that answered should stay readable
    _fit(heads, body, width, [(stop, _MID_STOP, False), (model, _MIN_MODEL, True), (stop, _MIN_STOP, False)])
    lines = _aligned(heads, body, {i for i, k in enumerate(keys) if k in _RIGHT})
    reasons: dict[str, int] = {}
    for r in rows:
        reasons[r.get("reason") or "?"] = reasons.get(r.get("reason") or "?", 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    lines.append(f"{len(rows)} exchange(s): {escape(summary)}")
    lines.append("")
    lines.append("totals per model")
    total_body = [[escape(v) for v in _total_cells(t)] for t in totals(rows)]
    _fit(_TOTAL_HEADS, total_body, width, [(0, _MIN_MODEL, True)])
    lines += _aligned(_TOTAL_HEADS, total_body, {1, 2, 3, 4, 5})
    return "\n".join(lines)


#: HTML in a Markdown table cell is rendered as HTML: ``<script>`` would run, ``&lt;`` would be read as ``<``
_MD_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|"})


def _md(v: str) -> str:
    return escape(v).translate(_MD_ESCAPES)


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    heads = [h for _, h in COLUMNS]
    lines = ["| " + " | ".join(heads) + " |",
             "|" + "|".join("---:" if k in _RIGHT else "---" for k, _ in COLUMNS) + "|"]
    for r in rows:
        c = cells(r)
        lines.append("| " + " | ".join(_md(c[k]) for k, _ in COLUMNS) + " |")
    lines += ["", "**Totals per model**", "", "| " + " | ".join(_TOTAL_HEADS) + " |",
              "|---|---:|---:|---:|---:|---:|"]
    for t in totals(rows):
        lines.append("| " + " | ".join(_md(v) for v in _total_cells(t)) + " |")
    return "\n".join(lines)


def to_json(rows: Sequence[dict[str, Any]]) -> str:
    """ASCII-only JSON (every other character as a ``\\u`` escape: lossless, and safe on a terminal)."""
    doc = {"exchanges": [{k: r.get(k) for k in FIELDS} for r in rows], "totals": totals(rows)}
    return json.dumps(doc, indent=2, ensure_ascii=True, default=str)


#: a spreadsheet reads a cell starting with one of these as a formula (``=HYPERLINK(…)``, ``@SUM(…)``)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_text(v: str) -> str:
    """A CSV text cell that a spreadsheet shows as text: a leading ``'`` before a formula start (the
    check is on the raw value, so a TAB / CR start counts too), then control characters escaped."""
    if v.lstrip(" ").startswith(_FORMULA_START):
        v = "'" + v
    return escape(v)


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """CSV of the rows; text cells neutralised for spreadsheets (numbers stay numbers)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(FIELDS)
    for r in rows:
        w.writerow(["" if r.get(k) is None else _csv_text(r[k]) if isinstance(r.get(k), str) else r.get(k)
                    for k in FIELDS])
    return buf.getvalue()


def format_rows(rows: Sequence[dict[str, Any]], fmt: str = "table", *, width: int = WIDTH) -> str:
    """The rows in one of :data:`FORMATS`; ``width`` applies to the table only."""
    if fmt == "table":
        return table(rows, width=width)
    if fmt == "json":
        return to_json(rows)
    if fmt == "csv":
        return to_csv(rows)
    if fmt == "markdown":
        return markdown(rows)
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


# ----------------------------------------------------------------------------- per session
#: the fields of a session in JSON (CSV: the same, lists and counts as text)
SESSION_FIELDS = ("session", "source", "turns", "start", "end", "models", "input_tokens", "output_tokens",
                  "cache_read_tokens", "cache_write_tokens", "cache_read_share", "cost_usd", "unpriced", "untokened",
                  "stops", "drops", "exchanges")
_SESSION_HEADS = ["session", "from", "turns", "tokens in→out", "cache read", "stops", "cost"]
_DROP_HEADS = ["time", "session", "turn", "cache read", "before", "what changed"]


def pct(v: float | None) -> str:
    return "?" if v is None else f"{v * 100:.0f}%"


def _stops(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def session_cells(s: dict[str, Any]) -> list[str]:
    src = s.get("source") or ""
    cost = fmt_usd(s["cost_usd"]) if s["turns"] > s["unpriced"] else "unknown"
    if s["unpriced"] and s["turns"] > s["unpriced"]:
        cost += f" + {s['unpriced']} unknown"
    known = s["untokened"] < s["turns"]
    return [s["session"] or "(none)", src.removeprefix("header:") or "-", str(s["turns"]),
            f"{s['input_tokens']}→{s['output_tokens']}" if known else "?→?",
            pct(s["cache_read_share"]) if known else "?", _stops(s["stops"]), cost]


def _drop_cells(s: dict[str, Any], d: dict[str, Any], *, compact: bool) -> list[str]:
    time = d.get("time") or "?"
    if compact and len(time) == 19 and time[4] == "-":
        time = time[5:]
    return [time, s["session"] or "(none)", str(d["turn"]), pct(d["cache_read_share"]), pct(d["running_share"]),
            "; ".join(d["changed"])]


def drops_title() -> str:
    return (f"cache-read drops (a turn {DROP_POINTS * 100:.0f} points or more below its conversation's running "
            "share, from its third turn)")


def session_table(rows: Sequence[dict[str, Any]], *, width: int = WIDTH) -> str:
    """Sessions, one line each (escaped), then the turns where a session's cache reads dropped."""
    if not rows:
        return "no LLM flows"
    groups = group_sessions(rows)
    body = [[escape(c) for c in session_cells(s)] for s in groups]
    _fit(_SESSION_HEADS, body, width, [(5, 12, False), (0, 14, False), (1, 6, False)])
    lines = _aligned(_SESSION_HEADS, body, {2, 3, 4, 6})
    lines.append(f"{len(groups)} session(s), {len(rows)} exchange(s)")
    drops = [_drop_cells(s, d, compact=True) for s in groups for d in s["drops"]]
    lines += ["", drops_title()]
    if drops:
        drops = [[escape(c) for c in d] for d in drops]
        _fit(_DROP_HEADS, drops, width, [(1, 14, False), (5, 24, False)])
        lines += _aligned(_DROP_HEADS, drops, {2, 3, 4})
    else:
        lines.append("none")
    return "\n".join(lines)


def _session_json(s: dict[str, Any]) -> dict[str, Any]:
    return {k: s.get(k) for k in SESSION_FIELDS}


def session_markdown(rows: Sequence[dict[str, Any]]) -> str:
    groups = group_sessions(rows)
    lines = ["| " + " | ".join(_SESSION_HEADS) + " |", "|---|---|---:|---:|---:|---|---:|"]
    lines += ["| " + " | ".join(_md(v) for v in session_cells(s)) + " |" for s in groups]
    lines += ["", f"**{drops_title()[:1].upper()}{drops_title()[1:]}**", ""]
    drops = [_drop_cells(s, d, compact=False) for s in groups for d in s["drops"]]
    if drops:
        lines += ["| " + " | ".join(_DROP_HEADS) + " |", "|---|---|---:|---:|---:|---|"]
        lines += ["| " + " | ".join(_md(v) for v in d) + " |" for d in drops]
    else:
        lines.append("none")
    return "\n".join(lines)


def session_csv(rows: Sequence[dict[str, Any]]) -> str:
    """One row per session: lists as text (models ``a; b``, stops ``tool_use 2, end_turn 1``, drops as the
    number of turns marked, exchanges as flow ids)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(SESSION_FIELDS)
    for s in group_sessions(rows):
        vals = dict(s, models="; ".join(s["models"]), stops=_stops(s["stops"]), drops=len(s["drops"]),
                    exchanges=" ".join(str(x) for x in s["exchanges"]))
        w.writerow(["" if vals.get(k) is None else _csv_text(vals[k]) if isinstance(vals.get(k), str) else vals[k]
                    for k in SESSION_FIELDS])
    return buf.getvalue()


def format_sessions(rows: Sequence[dict[str, Any]], fmt: str = "table", *, width: int = WIDTH) -> str:
    """The rows grouped per session (flow/session.py) in one of :data:`FORMATS`."""
    if fmt == "table":
        return session_table(rows, width=width)
    if fmt == "json":
        doc = {"sessions": [_session_json(s) for s in group_sessions(rows)]}
        return json.dumps(doc, indent=2, ensure_ascii=True, default=str)
    if fmt == "csv":
        return session_csv(rows)
    if fmt == "markdown":
        return session_markdown(rows)
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
