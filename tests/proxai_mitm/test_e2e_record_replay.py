"""End to end: record, replay, annotate offline, report (real mitmdump subprocesses, official SDKs).

- the scenarios of flows/make_flows.py are recorded through the addon against the fake upstream
  (``-w``); the files are checked against the shipped flows/ (same upstream requests, same StopInfo)
  and for credentials (the bytes are grepped for the keys the clients used);
- the upstream is stopped and the recorded tool loop is replayed (``proxai_replay``, reverse mode to a
  dead port, ``connection_strategy=lazy``) to an OpenAI Chat, an OpenAI Responses and an Anthropic
  client: same tool calls, text and stop; streams arrive event by event with the recorded gap;
  misses are native 404s;
- the README "Try it offline" replay command, as written there;
- ``mitmdump -nr`` of the shipped flows/ prints the StopInfo of every flow; ``-nr`` of a plain capture
  (made without the addon, of the same upstream traffic) yields the same StopInfo for every flow;
- ``python -m proxai_mitm report|export`` on flows/.

The mitmdumps start in two parallel waves (startup dominates the run time).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from proxai_mitm.flow.record import FlowRecord
from proxai_mitm.replay.index import canonical_key, split_sse_events
from tests.fake_upstream import FakeUpstream, Reply
from tests.mitm_harness import ROOT, Mitmdump, free_port, read_flows

pytestmark = pytest.mark.e2e

FLOWS = ROOT / "flows"


def _load_make_flows() -> Any:
    spec = importlib.util.spec_from_file_location("make_flows", FLOWS / "make_flows.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_flows"] = mod
    spec.loader.exec_module(mod)
    return mod


mf = _load_make_flows()
SHIPPED = [FLOWS / f"{sc.name}.mitm" for sc in mf.SCENARIOS]


# ----------------------------------------------------------------------------- the README command
def readme_replay_command() -> tuple[str, dict[str, str], str, dict]:
    """(mode, --set options, request path, JSON body) of the README's "Try it offline" replay."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Try it offline", 1)[1].split("\n## ", 1)[0]
    cmd = next(b for b in re.findall(r"```sh\n(.*?)```", section, re.S) if "proxai_replay=" in b)
    lines = cmd.replace("\\\n", " ").splitlines()
    dump = shlex.split(next(ln for ln in lines if "mitmdump" in ln and "proxai_replay" in ln))
    curl = shlex.split(next(ln for ln in lines if ln.lstrip().startswith("curl")))
    mode = dump[dump.index("--mode") + 1]
    sets = dict(dump[i + 1].split("=", 1) for i, a in enumerate(dump) if a == "--set")
    url = next(a for a in curl if a.startswith("http://"))
    body = json.loads(curl[curl.index("-d") + 1])
    return mode, sets, "/" + url.split("/", 3)[3], body


# ----------------------------------------------------------------------------- fixtures
@dataclass
class Env:
    tmp: Path
    up: FakeUpstream
    plain_up: FakeUpstream
    recorder: Mitmdump
    plain: Mitmdump
    nr_shipped: Mitmdump
    filter_shipped: Mitmdump
    readme: Mitmdump
    readme_request: tuple[str, dict]
    all_procs: list[Mitmdump]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("record-replay")
    up = FakeUpstream(use_defaults=False).start()
    plain_up = FakeUpstream(use_defaults=False).start()
    shipped = tmp / "shipped.mitm"  # every shipped file, concatenated (a .mitm file is a tnetstring stream)
    shipped.write_bytes(b"".join(p.read_bytes() for p in SHIPPED))
    mode, sets, path, body = readme_replay_command()
    mode = mode.split("@", 1)[0]  # the harness picks a free listen port
    procs = {
        "recorder": mf.recorder(up, tmp),
        # plain mitmproxy, no addon: streams captured with store_streamed_bodies
        "plain": Mitmdump(mode=f"reverse:{plain_up.url}", addon=None,
                          options={"stream_large_bodies": "1", "store_streamed_bodies": True}),
        "nr_shipped": Mitmdump(save=False, extra_args=["-n", "-r", str(shipped)]),
        # docs/recording.md "Share": a read filter on a recording made with the addon (no addon needed)
        "filter_shipped": Mitmdump(save=False, addon=None, extra_args=[
            "-n", "-r", str(shipped), "-w", str(tmp / "shipped-refusals.mitm"), "~comment ^refusal"]),  # older comments
        "readme": Mitmdump(mode=mode, options=sets, save=False),
    }
    for m in procs.values():
        m.startup_timeout = 120  # four at once on a busy machine
        m.start(wait=False)
    for k in ("recorder", "plain", "readme"):
        procs[k].wait_listening()
    e = Env(tmp, up, plain_up, readme_request=(path, body), all_procs=list(procs.values()), **procs)
    yield e
    for m in e.all_procs:
        m.cleanup()
    up.stop()
    plain_up.stop()


@dataclass
class Recorded:
    paths: list[Path]
    seen: dict[str, Any]
    replay: Mitmdump
    nr_plain: Mitmdump
    plain_out: Path
    filter_plain: Mitmdump


@pytest.fixture(scope="module")
def recorded(env):
    """Record the scenarios through the addon, capture the same upstream traffic with plain mitmproxy,
    stop the upstream; then start the replay proxy and the offline annotation of the plain capture."""
    seen = mf.record(env.recorder, env.up)
    env.recorder.stop()
    assert env.recorder.flows_path is not None
    paths = mf.split(env.recorder.flows_path, env.tmp / "flows")
    env.up.stop()  # from here on, nothing answers but the recordings

    plain_capture(env)
    env.plain.stop()
    assert env.plain.flows_path is not None
    out = env.tmp / "plain-annotated.mitm"
    nr_plain = Mitmdump(save=False, extra_args=["-n", "-r", str(env.plain.flows_path), "-w", str(out)])
    # the recording's routes, every recorded file (a folder), a dead upstream
    replay = Mitmdump(mode=f"reverse:http://127.0.0.1:{free_port()}",
                      options={"proxai_config": str(env.tmp / "routes.toml"), "proxai_replay": str(env.tmp / "flows"),
                               "connection_strategy": "lazy"}, save=False)
    # docs/recording.md "Filter": a plain capture is filtered at save time, after the addon annotated it
    filter_plain = Mitmdump(save=False, extra_args=[
        "-n", "-r", str(env.plain.flows_path), "-w", str(env.tmp / "plain-refusals.mitm"),
        "--set", 'save_stream_filter=~comment ^refusal'])
    env.all_procs += [nr_plain, replay, filter_plain]
    replay.startup_timeout = 120
    nr_plain.start(wait=False)
    filter_plain.start(wait=False)
    replay.start()
    return Recorded(paths, seen, replay, nr_plain, out, filter_plain)


_FRAMING = {"content-length", "transfer-encoding", "connection", "date", "server", "content-encoding"}


def plain_capture(env: Env) -> None:
    """Send the upstream request of every shipped flow through a plain mitmdump to a fake upstream that
    answers what the recording holds (status, headers, body; streams event by event; cut streams cut)."""
    n = 0
    for f in (f for p in SHIPPED for f in read_flows(p)):
        m = FlowRecord.of(f)  # (a schema-2 record keeps one copy when both sides are the same bytes)
        assert m is not None
        body = m.upstream_body(f) or b""
        # a pass-through flow's response is the upstream's own (the record keeps no second copy)
        status = m.upstream_status if m.upstream_status is not None else f.response.status_code
        kept = m.upstream_headers if m.upstream_headers is not None else list(f.response.headers.items())
        headers = [tuple(h) for h in kept if h[0].lower() not in _FRAMING]
        if "event-stream" in dict(headers).get("content-type", ""):
            events: list[Any] = list(split_sse_events(body))
            reply = Reply(status=status, headers=headers, events=events, delay=0.005)
            if m.upstream_cut:
                reply.events = events + [b""]
                reply.cut_after = len(events)
        else:
            reply = Reply(status=status, headers=headers, body=body)
        env.plain_up.reset()
        env.plain_up.on(f.request.path.partition("?")[0], reply)
        try:
            with httpx2.Client(timeout=10) as h, h.stream(
                    f.request.method, env.plain.url + f.request.path, content=f.request.get_content(),
                    headers={"content-type": "application/json"}) as r:
                for _ in r.iter_bytes():
                    pass
        except httpx2.HTTPError:
            pass  # the cut stream
        n += 1
        _wait(lambda n=n: len(env.plain.flows()) >= n, f"{n} plain flows")


def _wait(cond: Any, what: str, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _meta(path: Path) -> list[dict]:
    return [f.metadata["proxai"] for f in read_flows(path)]


# ----------------------------------------------------------------------------- recording
def test_recording_reproduces_the_shipped_flows(recorded):
    loop = recorded.seen["tool-loop"]
    assert [t.tools for t in loop] == mf.EXPECTED_LOOP["tools"]
    assert loop[-1].text == mf.EXPECTED_LOOP["text"]
    assert [t.stop for t in loop] == mf.EXPECTED_LOOP["stops"][mf.CHAT]
    mf.check_files(recorded.paths)  # StopInfo reasons per scenario, no credential
    for new, old in zip(recorded.paths, SHIPPED, strict=True):
        assert new.name == old.name
        a, b = read_flows(new), read_flows(old)
        assert len(a) == len(b), new.name
        for fa, fb in zip(a, b, strict=True):
            # the same upstream requests (replay keys) and the same StopInfo as the shipped files
            assert canonical_key(fa.request.method, fa.request.path, fa.request.get_content()) == \
                canonical_key(fb.request.method, fb.request.path, fb.request.get_content()), new.name
            assert fa.metadata["proxai"]["stop"] == fb.metadata["proxai"]["stop"], new.name
            assert fa.metadata["proxai"]["route"] == fb.metadata["proxai"]["route"]
        assert len(old.read_bytes()) < 40_000  # small enough to commit


def test_saved_files_contain_no_credential(recorded):
    for p in recorded.paths + SHIPPED:
        data = p.read_bytes()
        for secret in mf.SECRETS:
            assert secret.encode() not in data, (p, secret)
        assert b"Bearer sk-" not in data and b"sk-ant-api03-P" not in data
    flows = read_flows(recorded.paths[2])  # refusal-responses: a cookie each way
    f = flows[0]
    assert f.request.headers["authorization"] == "Bearer <redacted>"
    assert f.request.headers["cookie"] == "session=<redacted>"
    assert f.response.headers["set-cookie"] == "__cf_bm=<redacted>; path=/; HttpOnly"
    assert read_flows(recorded.paths[0])[0].request.headers["x-api-key"] == "<redacted>"


def test_saved_flow_is_complete(recorded):
    turn3 = read_flows(recorded.paths[0])[2]  # Chat client, Anthropic upstream, streamed
    m = turn3.metadata["proxai"]
    client_req = json.loads(m["client_request"])
    assert client_req["messages"][0] == {"role": "system", "content": mf.SYSTEM}  # the client's own request
    sent = json.loads(turn3.request.content)  # the request sent upstream
    assert turn3.request.path == "/v1/messages" and sent["system"] == mf.SYSTEM
    assert m["upstream_response"].startswith("event: message_start")  # the raw upstream stream
    assert "message_stop" in m["upstream_response"]
    client_body = turn3.response.content.decode()  # what the client received
    assert client_body.rstrip().endswith("data: [DONE]") and "chat.completion.chunk" in client_body
    assert m["upstream_status"] == 200 and ["cache-control", "no-cache"] in m["upstream_headers"]
    chunks = m["upstream_chunks"]
    assert sum(nb for _, nb in chunks) == len(m["upstream_response"].encode())
    gaps = [b[0] - a[0] for a, b in zip(chunks, chunks[1:])]
    assert max(gaps) >= mf.FINAL_GAP * 1000 * 0.9
    assert m["stop"]["reason"] == "end_turn" and m["usage"]["output"] == 9
    assert turn3.comment.startswith("end_turn")

    cut = read_flows(recorded.paths[5])[0]  # Anthropic client, Chat upstream cut mid-stream
    cm = cut.metadata["proxai"]
    assert cm["upstream_cut"] is True and cut.error is not None
    assert cut.response.content.startswith(b"event: message_start")  # the partial client stream
    assert cm["stop"]["reason"] == "interrupted"

    err = read_flows(recorded.paths[6])[0]  # 529 upstream → the Responses client's native 503
    em = err.metadata["proxai"]
    assert (em["upstream_status"], err.response.status_code) == (529, 503)
    assert ["retry-after", "12"] in em["upstream_headers"] and err.response.headers["retry-after"] == "12"
    assert json.loads(em["upstream_response"])["error"]["type"] == "overloaded_error"


# ----------------------------------------------------------------------------- replay
@pytest.mark.parametrize("protocol", [mf.CHAT, mf.RESP, mf.ANTH])
def test_replay_to_every_client_protocol(recorded, protocol):
    """The tool loop recorded from a Chat client against Anthropic, replayed with the upstream gone."""
    turns = mf.tool_loop(protocol, recorded.replay.url)
    assert [t.tools for t in turns] == mf.EXPECTED_LOOP["tools"]
    assert turns[-1].text == mf.EXPECTED_LOOP["text"]
    assert [t.stop for t in turns] == mf.EXPECTED_LOOP["stops"][protocol]
    # streamed event by event, with the recorded pacing: the last event waited for the recorded gap
    chunks = read_flows(recorded.paths[0])[2].metadata["proxai"]["upstream_chunks"]
    recorded_gap = max(b[0] - a[0] for a, b in zip(chunks, chunks[1:])) / 1000.0
    last = turns[-1]
    assert last.first_event is not None and last.done is not None
    assert last.done - last.first_event >= recorded_gap - 0.02, (last.done - last.first_event, recorded_gap)
    recorded.replay.wait_for_log(
        rf"proxai: {protocol} → anthropic_messages \((route [a-z-]+|pass-through), replay hit\)", count=3)


def test_replay_json_client_and_misses(recorded):
    url = recorded.replay.url
    turns = mf.tool_loop(mf.RESP, url, stream=False)  # the recording is a stream: collected for a JSON client
    assert [t.tools for t in turns] == mf.EXPECTED_LOOP["tools"] and turns[-1].text == mf.EXPECTED_LOOP["text"]
    with pytest.raises(openai.NotFoundError, match="proxai replay: no recording matches POST /v1/messages"):
        mf.openai_client(url).chat.completions.create(model=mf.MODEL, max_tokens=10,
                                                      messages=[{"role": "user", "content": "not recorded"}])
    with pytest.raises(anthropic.NotFoundError, match="no recording matches"):
        mf.anthropic_client(url).messages.create(model=mf.MODEL, max_tokens=10,
                                                 messages=[{"role": "user", "content": "not recorded"}])
    recorded.replay.wait_for_log(r"replay miss\), claude-sonnet-4-5, 404: ", count=2)


def test_replay_cut_stream_and_upstream_error(recorded):
    url = recorded.replay.url
    got: list[str] = []
    with pytest.raises((anthropic.APIConnectionError, httpx2.HTTPError)):  # cut again, like the recording
        with mf.anthropic_client(url).messages.stream(
                model="gpt-4o", max_tokens=mf.MAX_TOKENS,
                messages=[{"role": "user", "content": "What's the weather in Paris?"}]) as s:
            for ev in s:
                if ev.type == "content_block_delta":
                    got.append(ev.delta.text)
    assert got and "".join(got).startswith("Hello")  # the recorded part arrived first
    recorded.replay.wait_for_log(r"anthropic_messages → openai_chat_completions \(route claude-code-on-gpt, "
                                 r"replay hit\), gpt-4o, 200: interrupted")
    with pytest.raises(openai.InternalServerError) as ei:
        mf.openai_client(url).responses.create(model=mf.MODEL, input="Summarize the news.", max_output_tokens=200)
    assert ei.value.status_code == 503 and ei.value.response.headers["retry-after"] == "12"
    recorded.replay.wait_for_log(r"replay hit\), claude-sonnet-4-5, 503: interrupted \(overloaded\)")


def test_recording_md_replay_example(env):
    """The Python example of docs/recording.md "Replay offline", against the README's replay command
    (the same options but for an explicit connection_strategy=lazy, which the addon sets anyway)."""
    text = (ROOT / "docs" / "recording.md").read_text()
    code = re.search(r"uv run python - <<'PY'\n(.*?)\nPY\n", text, re.S).group(1)
    code = code.replace("127.0.0.1:8081", env.readme.url.removeprefix("http://"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == 'get_weather {"city":"Paris"}'


def test_readme_replay_command(env):
    path, body = env.readme_request
    r = httpx2.post(env.readme.url + path, json=body, timeout=10)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "chat.completion"  # a Chat client, served a recording made against Anthropic
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["choices"][0]["message"]["content"] == mf.MAX_OUTPUT_TEXT
    assert r.headers["x-proxai-replay"] == "hit"
    env.readme.wait_for_log(r"openai_chat_completions → anthropic_messages \(route default, replay hit\).*max_output")


# ----------------------------------------------------------------------------- offline annotation
def test_nr_prints_the_stopinfo_of_every_shipped_flow(env):
    m = env.nr_shipped
    assert m.wait_exit(90) == 0, m.log
    lines = [ln for ln in m.log.splitlines() if "proxai: " in ln and " → " in ln]
    stops = [x["stop"] for p in SHIPPED for x in _meta(p)]
    assert len(lines) == len(stops) == sum(len(sc.reasons) for sc in mf.SCENARIOS)
    for line, stop in zip(lines, stops, strict=True):
        assert f": {stop['reason']}" in line, (line, stop)


def test_nr_annotates_a_plain_capture_like_the_addon(recorded):
    m = recorded.nr_plain
    assert m.wait_exit(90) == 0, m.log
    plain = list({f.id: f for f in read_flows(recorded.plain_out)}.values())
    # (mitmproxy's Save writes a read flow that has a response *and* an error twice: once in `response`,
    # once in `error` — the cut stream here)
    shipped = [f for p in SHIPPED for f in read_flows(p)]
    assert len(plain) == len(shipped)
    for fp, fs in zip(plain, shipped, strict=True):
        assert fp.request.path == fs.request.path  # never rewritten
        got, want = fp.metadata["proxai"], fs.metadata["proxai"]
        assert got["route"] is None and got["client_protocol"] == want["upstream_protocol"]
        assert got["stop"]["reason"] == want["stop"]["reason"], (fs.request.path, got["stop"], want["stop"])
        if want["stop"]["reason"] != "interrupted":
            assert got["stop"]["category"] == want["stop"]["category"]
        assert fp.comment.startswith(want["stop"]["reason"])
        assert fp.marked == fs.marked


def test_documented_command_line_filters(env, recorded):
    for proc, out in ((env.filter_shipped, "shipped-refusals.mitm"), (recorded.filter_plain, "plain-refusals.mitm")):
        assert proc.wait_exit(90) == 0, proc.log
        flows = read_flows(env.tmp / out)
        assert [f.request.path for f in flows] == ["/v1/chat/completions", "/v1/responses", "/v1/messages"], out
        # the shipped recordings predate the summary comment; it starts with the reason either way
        assert all(f.comment.startswith("refusal") and f.marked == ":no_entry:" for f in flows)


# ----------------------------------------------------------------------------- reports
def test_report_and_export_cli(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "proxai_mitm", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)

    r = run("report", "flows")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if re.match(r"\d\d-\d\d \d\d:", ln)]
    assert len(rows) == 16
    expect = [("chat→anth", "tool_use"), ("chat→anth", "tool_use"), ("chat→anth", "end_turn"),
              ("chat", "refusal"), ("resp", "refusal"), ("anth", "refusal"), ("anth", "max_output"),
              ("anth→chat", "interrupted"), ("resp→anth", "interrupted"),
              *[("anth", "end_turn"), ("chat→anth", "end_turn")] * 3, ("anth", "end_turn")]
    # sorted by time: the order the scenarios were recorded in, whatever the file names
    for row, (protos, reason) in zip(rows, expect, strict=True):
        cells = re.split(r"\s{2,}", row)
        assert cells[1] == protos and cells[4].split(" ")[0] == reason, row
        assert cells[8] == "unknown" if reason == "interrupted" else cells[8].startswith("$"), row
    assert "16 exchange(s): end_turn 8, refusal 3, interrupted 2, tool_use 2, max_output 1" in r.stdout
    assert "refusal (cyber)" in r.stdout and "totals per model" in r.stdout

    out = tmp_path / "x.jsonl"
    r = run("export", "flows/tool-loop.mitm", str(out))
    assert r.returncode == 0 and "exported 3 LLM exchange(s)" in r.stderr
    lines = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [x["stop"]["reason"] for x in lines] == ["tool_use", "tool_use", "end_turn"]
    assert lines[0]["client_protocol"] == mf.CHAT and lines[0]["upstream_protocol"] == mf.ANTH
    assert lines[2]["request"]["system"] == mf.SYSTEM
    assert [p["type"] for p in lines[0]["response"]["parts"]] == ["tool_call"]
    assert lines[0]["response"]["parts"][0]["arguments"] == {"city": "Paris"}
    assert lines[2]["response"]["parts"][0] == {"type": "text", "text": mf.EXPECTED_LOOP["text"]}
    f = read_flows(SHIPPED[0])[0]
    assert lines[0]["replay_key"] == canonical_key("POST", "/v1/messages", f.request.get_content())
