"""The attempt server on its own: plans by token, attempts in order, cooldowns, its own answers."""

from __future__ import annotations

import asyncio
import json
import time

import h11
import pytest

from proxai_core import Protocol
from proxai_mitm.config.routes import BaseURL, Route, Upstream
from proxai_mitm.failover import server as srv
from proxai_mitm.failover.client import Pool
from proxai_mitm.failover.plan import FailoverPlan, Prepared
from proxai_mitm.limits.store import ProcessStore
from tests.fake_upstream import FakeUpstream, Reply

PATH = "/v1/chat/completions"
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture(scope="module")
def fakes():
    a, b = FakeUpstream().start(), FakeUpstream().start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def ups(fakes):
    for f in fakes:
        f.reset()
    return fakes


def route_to(a: FakeUpstream, b: FakeUpstream, **kw) -> Route:
    fb = Upstream("r#1", Protocol.CHAT, BaseURL("http", "127.0.0.1", b.port, "", ""), "KEY_B")
    return Route("r", Protocol.CHAT, BaseURL("http", "127.0.0.1", a.port, "", ""), "KEY_A", fallbacks=(fb,), **kw)


def plan_for(route: Route) -> FailoverPlan:
    a, b = (u.base_url for u in route.upstreams)
    first = Prepared("POST", "http", a.host, a.port, PATH, [], b"")

    def prepare(up: Upstream) -> Prepared:
        return Prepared("POST", "http", up.base_url.host, up.base_url.port, PATH,
                        [(b"host", f"127.0.0.1:{up.base_url.port}".encode()),
                         (b"content-type", b"application/json")], BODY, "m")

    return FailoverPlan(route, first, prepare, client_protocol=Protocol.CHAT)


async def send(port: int, token: str | None) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = h11.Connection(h11.CLIENT)
    headers = [("host", "127.0.0.1"), ("content-type", "application/json"), ("content-length", str(len(BODY)))]
    if token:
        headers.append((srv.TOKEN_HEADER, token))
    writer.write(conn.send(h11.Request(method="POST", target=PATH, headers=headers)))
    writer.write(conn.send(h11.Data(data=BODY)))
    writer.write(conn.send(h11.EndOfMessage()))
    status, head, body = 0, {}, b""
    while True:
        ev = conn.next_event()
        if ev is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
        elif isinstance(ev, h11.Response):
            status, head = ev.status_code, {k.decode(): v.decode() for k, v in ev.headers}
        elif isinstance(ev, h11.Data):
            body += ev.data
        else:
            break
    writer.close()
    return status, head, body


def run(route: Route, store: ProcessStore, *, token: bool = True, plan: FailoverPlan | None = None):
    async def go():
        server = srv.AttemptServer(Pool(), lambda: store, header_timeout=5)
        await server.start()
        try:
            p = plan or plan_for(route)
            result = await send(server.port, server.register(p) if token else None)
            return p, result
        finally:
            server.close()

    return asyncio.run(go())


def test_a_request_without_a_live_token_is_refused(ups):
    _, (status, _, body) = run(route_to(*ups), ProcessStore(), token=False)
    assert status == 404 and b"no such attempt" in body
    assert ups[0].requests == [] and ups[1].requests == []


def test_the_first_good_answer_is_relayed_and_named(ups):
    a, b = ups
    a.on(PATH, Reply.error(503, b'{"error": {"message": "busy"}}', headers=[("retry-after", "3")]))
    store = ProcessStore()
    plan, (status, head, body) = run(route_to(a, b), store)
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"]
    assert plan.answered == 1 and plan.prepared is not None and plan.prepared.model == "m"
    assert [(x.upstream, x.status, x.retry_after) for x in plan.attempts] == [("r", 503, 3.0), ("r#1", 200, None)]
    assert plan.attempts[0].reason == "HTTP 503: busy"
    left = store.view(srv.cool_name(plan.upstreams[0])) - time.time()
    assert 2 < left <= 3  # cooled for the upstream's own reset hint


def test_a_non_failover_status_is_the_answer(ups):
    a, b = ups
    a.on(PATH, Reply.error(401, b'{"error": {"message": "bad key"}}'))
    plan, (status, _, body) = run(route_to(a, b), ProcessStore())
    assert status == 401 and b"bad key" in body and plan.answered == 0 and b.requests == []


def test_every_upstream_failing_gives_the_last_answer(ups):
    a, b = ups
    for f in ups:
        f.on(PATH, Reply.error(500, b'{"error": {"message": "down"}}'))
    plan, (status, _, body) = run(route_to(a, b), ProcessStore())
    assert status == 500 and plan.answered == 1 and plan.native is None


def test_every_upstream_cooling_is_the_clients_429_with_the_soonest_retry_after(ups):
    a, b = ups
    route = route_to(a, b)
    store = ProcessStore()
    store.put(srv.cool_name(route.upstreams[0]), time.time() + 40)
    store.put(srv.cool_name(route.upstreams[1]), time.time() + 12)
    plan, (status, head, body) = run(route, store)
    assert status == 429 and head["retry-after"] == "12"
    assert "every upstream of route 'r' is rate limited" in json.loads(body)["error"]["message"]
    assert plan.answered is None and plan.native is not None and a.requests == [] and b.requests == []


def test_retries_back_off_then_move_on(ups):
    a, b = ups
    a.on(PATH, Reply.error(502, b"{}"))
    plan, (status, _, _) = run(route_to(a, b, retries=2, backoff=0.01), ProcessStore())
    assert status == 200 and [x.status for x in plan.attempts] == [502, 502, 502, 200]


def test_a_fallback_that_cannot_be_prepared_is_skipped_with_its_reason(ups):
    a, b = ups
    a.on(PATH, Reply.error(500, b"{}"))
    plan = plan_for(route_to(a, b))
    plan.prepare = lambda up: "the request cannot be sent as openai_chat_completions: no"
    plan, (status, _, _) = run(plan.route, ProcessStore(), plan=plan)
    assert status == 500 and plan.attempts[-1].reason.startswith("the request cannot be sent")


def test_plans_waiting_for_their_flow_are_bounded(monkeypatch):
    monkeypatch.setattr(srv, "MAX_PLANS", 3)
    server = srv.AttemptServer(Pool(), ProcessStore)
    tokens = [server.register(object()) for _ in range(5)]  # type: ignore[arg-type]
    assert len(server._plans) == 3 and list(server._plans) == tokens[2:]


def test_only_a_limited_answer_cools_and_the_429_says_when_to_retry(ups):
    a, b = ups
    a.on(PATH, Reply.error(502, b'{"error": {"message": "bad gateway"}}'))
    store = ProcessStore()
    plan, (status, _, _) = run(route_to(a, b), store)
    assert status == 200 and plan.answered == 1
    assert store.view(srv.cool_name(plan.upstreams[0])) is None  # failed over, but a 502 is no limit
    store.put(srv.cool_name(plan.upstreams[0]), time.time() + 40)
    store.put(srv.cool_name(plan.upstreams[1]), time.time() + 12)
    _, (status, head, _) = run(plan.route, store)
    assert status == 429 and head["retry-after"] == "12" and head["x-should-retry"] == "true"
    assert 11_000 < int(head["retry-after-ms"]) <= 12_000
