"""Hostile routes files through a real mitmdump (issue 21, row 13): a FIFO, /dev/zero and deep
nesting each give one error line naming the file, and mitmdump exits 1 at once without listening
(before: a hang that ignored SIGTERM, memory read until exhausted, a RecursionError traceback)."""

from __future__ import annotations

import os

import pytest

from tests.mitm_harness import Mitmdump

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("routes")
    fifo = tmp / "routes.fifo"
    os.mkfifo(fifo)
    deep = tmp / "deep.toml"
    deep.write_text('[[routes]]\nname = "a"\ntarget = { protocol = "openai_responses" }\n'
                    "match = { host = " + "[" * 3000 + "]" * 3000 + " }\n")
    paths = {"fifo": fifo, "zero": "/dev/zero", "deep": deep}
    ms = {k: Mitmdump(options={"proxai_config": str(p)}, save=False) for k, p in paths.items()}
    for m in ms.values():
        m.start(wait=False)
    try:
        yield {k: (m.wait_exit(120), m.log, str(paths[k])) for k, m in ms.items()}
    finally:
        for m in ms.values():
            m.cleanup()


@pytest.mark.parametrize("key, says", [("fifo", "is not a regular file"), ("zero", "is not a regular file"),
                                       ("deep", "nested more than 16 levels deep")])
def test_hostile_routes_file_is_one_line_naming_it(runs, key, says):
    rc, log, path = runs[key]
    errors = [ln for ln in log.splitlines() if "proxai: invalid option proxai_config" in ln]
    assert len(errors) == 1 and path in errors[0] and says in errors[0], log
    assert rc == 1, log
    assert "Traceback" not in log and "listening at" not in log, log
