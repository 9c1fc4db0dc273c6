"""Issue 21, row 9, through a real mitmdump: the upstream echoes the configured key in its error body,
written each way (JSON ``\\/`` / ``\\u00xx`` / mixed, percent upper / lower / every byte, HTML
references, base64). No form of it reaches the client's error body (translated Anthropic error, or
the same-protocol error passed through), the log line, the recording, the HAR export; and a recording
written by an older version (the key in it, raw header and encoded echo) is scrubbed again by the
readers: the replay answers, the report (JSON, CSV), the export and the HTML report."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import httpx2
import pytest
from mitmproxy import io as mio

from proxai_mitm.__main__ import main
from tests.fake_upstream import FakeUpstream, Reply
from tests.mitm_harness import Mitmdump, free_port
from tests.proxai_mitm.redaction.test_redact_encoded import KEY, encoded_forms, leaks

pytestmark = pytest.mark.e2e

ENV = "PROXAI_I21_KEY"
OTHER_KEY = "another-configured-key-0123456789"  # the replay run's key: it cannot scrub KEY
FORMS = [f for f in encoded_forms(KEY) if f != "pct_plus"]  # KEY has no space: pct_plus == pct_upper
#: what the upstream sends, in order: each form plain, then one gzip-compressed (re-encoded when cut),
#: then a 2 MB one, every other character an escape (scanned off the event loop)
SENT = [(f, None, 0) for f in FORMS] + [("json_mixed", "gzip", 0), ("json_mixed", None, 700_000)]
N = 2 * len(SENT)  # flows: each asked by two clients
CHAT = "/v1/chat/completions"
ANTH_BODY = {"model": "to-chat-x", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
CHAT_BODY = {"model": "to-chat-x", "messages": [{"role": "user", "content": "hi"}]}


def _error_body(form: str, pad: int = 0) -> bytes:
    """OpenAI's 401 for a wrong key, which quotes the key back (here in one encoded form)."""
    return ('{"error":{"message":"Incorrect API key provided: ' + encoded_forms(KEY)[form] + " %41" * pad
            + '. You can find your API key at https:\\/\\/platform.openai.com\\/account\\/api-keys.",'
            '"type":"invalid_request_error","param":null,"code":"invalid_api_key"}}').encode()


def _kib(pid: int, field: str) -> int:
    """A memory figure of a process (/proc/PID/status, kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def _routes(tmp: Path, base_url: str) -> Path:
    p = tmp / "routes.toml"
    p.write_text(f'[[routes]]\nname = "to-chat"\nmatch = {{ model = "to-chat*" }}\n'
                 f'target = {{ protocol = "openai_chat_completions", base_url = "{base_url}", '
                 f'api_key_env = "{ENV}" }}\n')
    return p


def _ask(c: httpx2.Client, base: str) -> tuple[httpx2.Response, httpx2.Response]:
    """The same request from an Anthropic client (translated error) and a Chat client (same
    protocol: the error passes through)."""
    a = c.post(base + "/v1/messages", json=ANTH_BODY,
               headers={"x-api-key": "client-key-0123456789", "anthropic-version": "2023-06-01"})
    o = c.post(base + CHAT, json=CHAT_BODY, headers={"authorization": "Bearer client-key-0123456789"})
    return a, o


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """One mitmdump with the route's key; every form asked by both clients; then stopped (the HAR is
    written at shutdown)."""
    tmp = tmp_path_factory.mktemp("i21")
    up = FakeUpstream().start()
    m = Mitmdump(mode=f"reverse:{up.url}", env={ENV: KEY},
                 options={"proxai_config": str(_routes(tmp, up.url)), "hardump": str(tmp / "flows.har")})
    m.startup_timeout = 120
    answers: dict[str, tuple[httpx2.Response, httpx2.Response]] = {}
    try:
        m.start()
        assert m.proc is not None
        rss0 = hwm0 = 0
        with httpx2.Client(timeout=60) as c:
            for i, (form, coding, pad) in enumerate(SENT):
                if i == 1:  # after the first pair: the code paths are imported and warm
                    rss0, hwm0 = _kib(m.proc.pid, "VmRSS"), _kib(m.proc.pid, "VmHWM")
                up.on(CHAT, Reply(status=401, body=_error_body(form, pad),
                                  headers=[("content-type", "application/json")], encoding=coding))
                answers[form + (f"+{coding}" if coding else "") + ("+big" if pad else "")] = _ask(c, m.url)
        # the peak since, when it passed the start-up peak; else what is resident now
        hwm = _kib(m.proc.pid, "VmHWM")
        growth = max(_kib(m.proc.pid, "VmRSS"), hwm if hwm > hwm0 else 0) - rss0
        sent = [r for r in up.requests if r.path == CHAT]
        assert len(sent) == N and all(r.header("authorization") == f"Bearer {KEY}" for r in sent)
        m.wait_for_log(r"proxai: .*401", count=N, timeout=30)
        m.stop()
        assert m.flows_path is not None
        yield {"answers": answers, "log": m.log, "growth_kib": growth, "recording": m.flows_path.read_bytes(),
               "har": (tmp / "flows.har").read_bytes(), "flows_path": m.flows_path, "tmp": tmp}
    finally:
        m.cleanup()
        up.stop()


@pytest.mark.parametrize("form", [*FORMS, "json_mixed+gzip", "json_mixed+big"])
def test_client_error_bodies_carry_no_form_of_the_key(live, form):
    anth, chat = live["answers"][form]
    assert anth.status_code == 401 and chat.status_code == 401
    err = anth.json()
    assert err["type"] == "error" and err["error"]["type"] == "authentication_error"
    assert "Incorrect API key provided: " in err["error"]["message"] and "<redacted>" in err["error"]["message"]
    assert "<redacted>" in chat.json()["error"]["message"]  # passed through, still JSON, key cut out
    assert not leaks(anth.content), leaks(anth.content)
    assert not leaks(chat.content), leaks(chat.content)


def test_memory_growth_is_bounded(live):
    """The run after the first (warm-up) pair, 2 MB escape-heavy bodies included: mitmdump's peak
    RSS grows < 64 MB."""
    print(f"mitmdump peak RSS growth: {live['growth_kib']} kB")
    assert live["growth_kib"] < 64 * 1024, live["growth_kib"]


def test_log_lines_carry_no_form_of_the_key(live):
    lines = [ln for ln in live["log"].splitlines() if "proxai: " in ln and "401" in ln]
    assert len(lines) >= N and any("<redacted>" in ln for ln in lines)
    assert not leaks(live["log"]), leaks(live["log"])


@pytest.mark.parametrize("out", ["recording", "har"])
def test_recording_and_har_carry_no_form_of_the_key(live, out):
    blob = live[out]
    assert b"Incorrect API key provided" in blob
    assert not leaks(blob), leaks(blob)
    if out == "har":
        entries = json.loads(blob)["log"]["entries"]
        assert len(entries) == N


# ----------------------------------------------------------------------------- an older recording
@pytest.fixture(scope="module")
def old_recording(live):
    """The live recording as an older version would have written it: the key in the upstream
    request's header, each form echoed in the bodies and the record (where ``<redacted>`` is now)."""
    with open(live["flows_path"], "rb") as fh:
        flows = list(mio.FlowReader(fh).stream())
    assert len(flows) == N
    path = live["tmp"] / "old.mitm"
    with open(path, "wb") as fh:
        w = mio.FlowWriter(fh)
        for i, f in enumerate(flows):
            enc = encoded_forms(KEY)[SENT[i // 2][0]]
            f.request.headers["authorization"] = f"Bearer {KEY}"
            f.response.content = f.response.content.replace(b"<redacted>", enc.encode())
            rec = f.metadata["proxai"]
            if rec.get("upstream_response"):
                rec["upstream_response"] = rec["upstream_response"].replace("<redacted>", enc)
            w.add(f)
    assert all(encoded_forms(KEY)[form].encode() in path.read_bytes() for form in FORMS)
    return path


def test_replay_answers_from_an_older_recording_carry_no_form_of_the_key(live, old_recording):
    """Replayed with another configured key (so only the reader's scrub can know KEY)."""
    m = Mitmdump(mode=f"reverse:http://127.0.0.1:{free_port()}", env={ENV: OTHER_KEY}, save=False,
                 options={"proxai_config": str(_routes(live["tmp"], "http://127.0.0.1:9")),
                          "proxai_replay": str(old_recording), "connection_strategy": "lazy"})
    m.startup_timeout = 120
    try:
        m.start()
        with httpx2.Client(timeout=30) as c:
            for form, _, _ in SENT:
                anth, chat = _ask(c, m.url)
                assert anth.status_code == 401 and chat.status_code == 401, (anth.text, chat.text)
                assert "Incorrect API key provided" in anth.text and "Incorrect API key provided" in chat.text
                assert not leaks(anth.content) and not leaks(chat.content), (form, anth.text, chat.text)
    finally:
        m.cleanup()


def test_report_export_and_html_of_an_older_recording_carry_no_form_of_the_key(live, old_recording):
    tmp = live["tmp"]
    outs = []
    for fmt in ("json", "csv"):
        buf = io.StringIO()
        with redirect_stdout(buf):
            assert main(["report", str(old_recording), "-f", fmt]) == 0
        outs.append(buf.getvalue())
    with redirect_stdout(io.StringIO()):
        assert main(["export", str(old_recording), str(tmp / "x.jsonl")]) == 0
        assert main(["report", str(old_recording), "--html", str(tmp / "r.html")]) == 0
    outs += [(tmp / "x.jsonl").read_text(), (tmp / "r.html").read_text()]
    for out in outs:
        assert "Incorrect API key provided" in out
        assert not leaks(out), leaks(out)
