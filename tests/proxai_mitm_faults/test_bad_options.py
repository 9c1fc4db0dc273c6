"""A bad value for any proxai_* option, through a real mitmdump: one clear error line naming the
option, exit status 1, no traceback, and the proxy never says it listens (it must not serve a single
request without the addon)."""

from __future__ import annotations

import pytest

from tests.mitm_harness import Mitmdump

pytestmark = pytest.mark.e2e

CHAT = "openai_chat_completions"

#: every proxai_* option with a bad value -> what the one error line says
BAD = {
    "target": ({"proxai_target": "nonsense"}, "proxai_target: must be one of"),
    "upstream": ({"proxai_target": CHAT, "proxai_upstream": "ftp://x"}, "proxai_upstream: 'ftp://x' must look like"),
    "key_env": ({"proxai_target": CHAT, "proxai_key_env": "1bad"}, "proxai_key_env: must be an environment variable"),
    "model": ({"proxai_target": CHAT, "proxai_model": "a,b"}, "proxai_model: expected one model name"),
    "config": ({"proxai_config": "/nonexistent/routes.toml"}, "proxai_config: cannot read '/nonexistent/routes.toml'"),
    "replay": ({"proxai_replay": "/nonexistent/s.mitm"}, "proxai_replay: /nonexistent/s.mitm does not exist"),
    "replay_fast": ({"proxai_replay_fast": "maybe"}, "proxai_replay_fast='maybe': expected true or false"),
    "replay_miss": ({"proxai_replay_miss": "bogus"}, "proxai_replay_miss: must be one of error, forward"),
    "otel_endpoint": ({"proxai_otel_endpoint": "ftp://x"}, "proxai_otel_endpoint: an http(s) URL"),
    "otel_content": ({"proxai_otel_content": "2"}, "proxai_otel_content='2': expected true or false"),
    "header_timeout": ({"proxai_header_timeout": "-1"}, "proxai_header_timeout: must be 0 (off)"),
    "header_timeout_text": ({"proxai_header_timeout": "soon"}, "proxai_header_timeout='soon': expected a whole number"),
    "record_limit": ({"proxai_record_limit": "-1"}, "proxai_record_limit: must be 0 or a positive"),
    "body_limit": ({"proxai_body_limit": "abc"}, "proxai_body_limit='abc': expected a whole number"),
    "body_limit_zero": ({"proxai_body_limit": "0"}, "proxai_body_limit: must be a positive number"),
    "allow_remote": ({"proxai_allow_remote": "yes"}, "proxai_allow_remote='yes': expected true or false"),
    "idle_timeout": ({"proxai_idle_timeout": "-3"}, "proxai_idle_timeout: must be 0 (off)"),
    "redact": ({"proxai_redact": "maybe"}, "proxai_redact='maybe': expected true or false"),
    "typo": ({"proxai_targt": CHAT}, "proxai_targt: no such option"),
}
#: mitmdumps started at once (2 shared cores: startup dominates, but not all 19 together)
BATCH = 5


@pytest.fixture(scope="module")
def runs():
    out: dict[str, tuple[int, str]] = {}
    keys = list(BAD)
    for i in range(0, len(keys), BATCH):
        batch = {k: Mitmdump(options=BAD[k][0], save=False) for k in keys[i:i + BATCH]}
        for m in batch.values():
            m.start(wait=False)
        try:
            for k, m in batch.items():
                out[k] = (m.wait_exit(120), m.log)
        finally:
            for m in batch.values():
                m.cleanup()
    return out


@pytest.mark.parametrize("key", list(BAD))
def test_bad_option_value_is_one_line_and_no_listening(runs, key):
    rc, log = runs[key]
    errors = [ln for ln in log.splitlines() if "proxai: invalid option" in ln]
    assert len(errors) == 1 and BAD[key][1] in errors[0], log
    assert rc == 1, log
    assert "Traceback" not in log and "error in script" not in log, log
    assert "listening at" not in log, log
