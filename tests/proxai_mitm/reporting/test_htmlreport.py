"""htmlreport.py: the self-contained HTML report (parsed with html.parser: every flow and figure is there)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from proxai_mitm import cli
from proxai_mitm.flow.metrics import fmt_ms, fmt_usd
from proxai_mitm.reporting.htmlreport import render_html
from proxai_mitm.reporting.report import read_flows, rows
from proxai_mitm.reporting.reportfmt import cells

from ..helpers import ANTH, json_bytes, make_flow, respond

FLOWS = Path(__file__).resolve().parents[3] / "flows"


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.ids: set[str] = set()
        self.stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if a.get("id"):
            self.ids.add(a["id"])

    def handle_data(self, data):
        self.text.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def _page(html: str) -> Page:
    p = Page()
    p.feed(html)
    p.close()
    return p


def _flows():
    return [f for p in sorted(FLOWS.glob("*.mitm")) for f in read_flows(p)]


def test_every_flow_and_figure_is_in_the_page():
    flows = _flows()
    table = rows(flows)
    page = _page(render_html(flows, table))
    text = page.all_text
    assert {"flows", "totals"} <= page.ids
    for r in table:
        assert f"flow-{r['id']}" in page.ids  # a conversation section per flow
        c = cells(r)
        for v in (c["stop"], c["ttft"], c["duration"], c["cost"], c["tokens"]):
            assert v in text, (r["id"], v)
    # the table rows link to the conversations
    links = {a.get("href") for t, a in page.tags if t == "a"}
    assert {f"#flow-{r['id']}" for r in table} <= links
    # one timeline bar segment per phase; generation coloured by its stop reason
    rects = [a for t, a in page.tags if t == "rect"]
    assert len(rects) >= 2 * len(table)
    assert {"#c0392b", "#3b6fd8", "#2e8b57", "#d98e04"} <= {a["fill"] for a in rects}
    assert sum(1 for t, _ in page.tags if t == "svg") == 2
    # totals: the summed known cost
    known = sum(r["cost_usd"] for r in table if r["cost_usd"] is not None)
    assert f"total cost {fmt_usd(known)}" in text
    # conversations: the request and the answer of the tool loop
    assert "tool call" in text and "get_weather" in text and "tool result" in text
    assert "⛔ REFUSAL" in text and "⚠ ERROR" in text
    assert fmt_ms(table[0]["ttft_ms"]) in text


def test_self_contained_no_script_no_network():
    flows = _flows()
    html = render_html(flows, rows(flows))
    page = _page(html)
    tags = {t for t, _ in page.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    for _, a in page.tags:
        for k, v in a.items():
            if k in ("href", "src", "action") and v:
                assert v.startswith("#"), (k, v)
    assert "http://" not in html and "https://" not in html and "//cdn" not in html


def test_recorded_text_is_escaped():
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)> \x1b[31m"
    body = {"model": "claude-x", "max_tokens": 8, "system": evil,
            "messages": [{"role": "user", "content": evil}]}
    f = make_flow(ANTH, body=body)
    respond(f, 200, json_bytes(ANTH).replace(b"claude-sonnet-4-5-20250929", b"<b>m</b>"), "application/json")
    html = render_html([f], rows([f]))
    page = _page(html)
    assert not {t for t, _ in page.tags} & {"script", "img", "b"}
    assert "<script>alert(1)</script>" in page.all_text  # shown as text
    assert "\x1b" not in html and "\\x1b[31m" in page.all_text


def test_cli_html(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert cli.main(["report", str(FLOWS), "--html", str(out), "--stop", "refusal"]) == 0
    page = _page(out.read_text())
    sections = [a["id"] for t, a in page.tags if t == "section"]
    assert len(sections) == 3
    printed = capsys.readouterr().out  # the table too: --help says the HTML is "also" written
    assert printed.count("refusal") >= 3 and "3 exchange(s)" in printed
    assert cli.main(["report", str(FLOWS), "--html", str(out), "-f", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["exchanges"]) == 16  # every flow of flows/


def test_sessions_and_the_turn_where_the_cache_read_dropped():
    flows = read_flows(FLOWS / "sessions.mitm")
    table = rows(flows)
    html = render_html(flows, table)
    page = _page(html)
    assert {"sessions", "drops"} <= page.ids
    text = page.all_text
    agent = next(r["session"] for r in table if r["session_source"] == "header:x-claude-code-session-id")
    tutor = next(r["session"] for r in table if r["session_source"] == "prefix")
    assert agent in text and tutor in text and "x-claude-code-session-id" in text
    last = max((r for r in table if r["session"] == agent), key=lambda r: r["timestamp"])
    section = html.split(f'id="flow-{last["id"]}"', 1)[1].split("</section>", 1)[0]
    assert "cache read dropped to 0% of the input" in section and "system prompt changed" in section
    assert f"session {agent}" in section
    assert sum(html.count(f'id="flow-{r["id"]}"') for r in table) == 7
    assert html.count("cache read dropped to") == 1  # the other turns are not marked
    # the drops table links to the marked turn
    assert ("a", {"href": f"#flow-{last['id']}"}) in page.tags
