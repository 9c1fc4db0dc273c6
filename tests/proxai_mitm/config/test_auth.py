"""The ``auth`` field of a route target and the ``proxai_auth`` option: forms and their errors."""

from __future__ import annotations

import pytest

from proxai_mitm.config.routes import ConfigError, parse_auth, routes_from_options, routes_from_toml

CHAT = "openai_chat_completions"


@pytest.mark.parametrize("value", ["aws", "aws:dev", "aws:my.profile-1", "aws@eu-west-1", "aws:dev@us-east-1",
                                   "aws-bearer", "aws-bearer:MY_BEDROCK_KEY", "google", "bearer:VERTEX_TOKEN"])
def test_auth_forms_accepted(value):
    assert parse_auth(value) == value


@pytest.mark.parametrize("value", ["gcp", "aws:", "aws@", "bearer", "bearer:1X", "aws-bearer:", "google:x",
                                   "aws:a b", "AWS", "aws@EU"])
def test_auth_forms_refused_naming_the_forms(value):
    with pytest.raises(ConfigError, match=r"proxai_auth: must be one of aws, aws:<profile>"):
        parse_auth(value, "proxai_auth")


def test_empty_auth_is_none():
    assert parse_auth("") is None and parse_auth(None) is None and parse_auth("  ") is None


def test_option_makes_the_default_route_carry_auth():
    (route,) = routes_from_options(CHAT, "https://bedrock-runtime.us-east-1.amazonaws.com", "", "m", "aws:dev").routes
    assert route.auth == "aws:dev" and route.api_key_env is None
    assert route.describe().endswith(", auth aws:dev")
    assert routes_from_options(CHAT, "", "", "").routes[0].auth is None


def test_option_refuses_key_env_and_auth_together():
    with pytest.raises(ConfigError, match="proxai_auth: give either proxai_key_env or proxai_auth"):
        routes_from_options(CHAT, "https://x.example", "KEY", "", "google")


def test_routes_file_auth_field(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('[[routes]]\nname="b"\ntarget={protocol="anthropic_messages", base_url="https://x.example", '
                 'auth="aws-bearer"}\n')
    assert routes_from_toml(p).routes[0].auth == "aws-bearer"


@pytest.mark.parametrize("target, expect", [
    ('{protocol="anthropic_messages", auth="azure"}', "route 'b' (routes[0]): target.auth: must be one of"),
    ('{protocol="anthropic_messages", auth="google", api_key_env="K"}',
     "route 'b' (routes[0]): target: give either api_key_env or auth, not both"),
])
def test_routes_file_auth_errors(tmp_path, target, expect):
    p = tmp_path / "r.toml"
    p.write_text(f'[[routes]]\nname="b"\ntarget={target}\n')
    with pytest.raises(ConfigError) as e:
        routes_from_toml(p)
    assert expect in str(e.value)
