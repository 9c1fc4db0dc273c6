"""Routes with ordered fallbacks: the file format, its bounds and its errors."""

from __future__ import annotations

import pytest

from proxai_core import Protocol
from proxai_mitm.config.routes import FAILOVER_STATUSES, ConfigError, routes_from_options, routes_from_toml

ROUTE = '''
[[routes]]
name = "claude"
match = { model = "claude-*" }
retry_on = [402, 404]
retries = 2
backoff = 0.25
attempt_timeout = 30
target = { protocol = "anthropic_messages", base_url = "https://api.anthropic.com", api_key_env = "ANTHROPIC_KEY" }

[[routes.fallbacks]]
protocol = "openai_responses"
base_url = "https://api.openai.com/v1"
api_key_env = ["OPENAI_KEY_1", "OPENAI_KEY_2"]
model = "gpt-5"

[[routes.fallbacks]]
protocol = "openai_chat_completions"
base_url = "http://127.0.0.1:8000/v1"
'''


def write(tmp_path, text: str):
    p = tmp_path / "routes.toml"
    p.write_text(text)
    return p


def test_fallbacks_are_upstreams_in_order(tmp_path):
    (route,) = routes_from_toml(write(tmp_path, ROUTE)).routes
    own, first, second = route.upstreams
    assert (own.name, own.protocol, own.api_key_env) == ("claude", Protocol.ANTHROPIC, "ANTHROPIC_KEY")
    assert (first.name, first.protocol, str(first.base_url)) == ("claude#1", Protocol.RESPONSES,
                                                                 "https://api.openai.com/v1")
    assert first.key_envs == ("OPENAI_KEY_1", "OPENAI_KEY_2") and first.models.map("claude-x") == "gpt-5"
    assert second.key_envs == () and second.models.map("claude-x") == "claude-x"
    assert route.failover_statuses == FAILOVER_STATUSES | {402, 404}
    assert (route.retries, route.backoff, route.attempt_timeout) == (2, 0.25, 30)
    assert route.describe().endswith(", then openai_responses at https://api.openai.com/v1, "
                                     "then openai_chat_completions at http://127.0.0.1:8000/v1")


def test_failover_statuses_are_the_temporary_ones():
    assert {408, 409, 429, 500, 502, 503, 504, 529} <= FAILOVER_STATUSES
    assert not {400, 401, 403, 404, 413, 422} & FAILOVER_STATUSES


def test_a_route_without_fallbacks_is_unchanged(tmp_path):
    (route,) = routes_from_toml(write(tmp_path, ROUTE.split("\n[[routes.fallbacks]]")[0])).routes
    assert route.fallbacks == () and len(route.upstreams) == 1
    (default,) = routes_from_options("openai_chat_completions", "", "", "").routes
    assert default.fallbacks == () and default.retries == 0 and default.failover_statuses == FAILOVER_STATUSES


def test_the_missing_key_error_names_the_fallback(tmp_path):
    (route,) = routes_from_toml(write(tmp_path, ROUTE)).routes
    assert route.upstreams[1].key_where == "route 'claude' fallbacks[0].api_key_env"
    assert route.upstreams[0].key_where == "route 'claude' target.api_key_env"


@pytest.mark.parametrize("edit,message", [
    (("retries = 2", "retries = 9"), "retries: Value error|retries: must be 0 to 5"),
    (("backoff = 0.25", "backoff = -1"), "backoff: must be 0 to 30"),
    (("retry_on = [402, 404]", "retry_on = [200]"), "retry_on: statuses must be 400 to 599"),
    (("attempt_timeout = 30", "attempt_timeout = 0"), "attempt_timeout: must be more than 0"),
    (('protocol = "openai_responses"', 'protocol = "soap"'), r"fallbacks\.0\.protocol: must be one of"),
    (('model = "gpt-5"', 'model = "gpt-5"\nkey = "x"'), r"fallbacks\.0\.key: unknown field"),
    (('api_key_env = ["OPENAI_KEY_1", "OPENAI_KEY_2"]', 'api_key_env = "OPENAI_KEY_1"\nauth = "google"'),
     "fallbacks.0: give either api_key_env or auth"),
])
def test_a_bad_route_is_a_clear_error(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message) as e:
        routes_from_toml(write(tmp_path, ROUTE.replace(*edit)))
    assert "route 'claude' (routes[0])" in str(e.value)


def test_too_many_fallbacks(tmp_path):
    extra = "".join('\n[[routes.fallbacks]]\nprotocol = "openai_chat_completions"\n' for _ in range(8))
    with pytest.raises(ConfigError, match="fallbacks: at most 8 fallbacks, got 10"):
        routes_from_toml(write(tmp_path, ROUTE + extra))
