from __future__ import annotations

import pytest

from tests.conftest import FIXTURES  # noqa: F401  (kept name for these tests)

from .chain import chain


@pytest.fixture
def addon():
    """The ProxAI addon list under taddons (``addon.request(flow)`` runs every addon's hook)."""
    with chain() as c:
        yield c
        c.replayer.done()


# ----------------------------------------------------------------------------- end-to-end fixtures
# One strict loopback fake upstream per test module (``upstream``), reset for each test (``up``), the
# usual routed proxy (``proxy``), and the official SDK clients on the module's ``proxy`` (``clients``).
@pytest.fixture(scope="module")
def upstream():
    from tests.fake_upstream import FakeUpstream

    up = FakeUpstream().start()
    yield up
    up.stop()


@pytest.fixture(scope="module")
def proxy(upstream, tmp_path_factory):
    """The usual one: a reverse-mode mitmdump in front of ``upstream`` with the e2e routes file
    (modules with other needs define their own)."""
    from tests.mitm_harness import Mitmdump, free_port

    from .e2e_util import ENV_KEY, ENV_KEY_VALUE, write_routes

    routes = write_routes(tmp_path_factory.mktemp("routes"), upstream, free_port())
    m = Mitmdump(mode=f"reverse:{upstream.url}", options={"proxai_config": str(routes)},
                 env={ENV_KEY: ENV_KEY_VALUE})
    m.start()
    yield m
    m.cleanup()


@pytest.fixture
def up(upstream):
    upstream.reset()
    return upstream


@pytest.fixture(scope="module")
def clients(proxy):
    from .e2e_util import make_clients

    return make_clients(proxy.url)
