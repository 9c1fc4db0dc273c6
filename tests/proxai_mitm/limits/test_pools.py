"""Key pools: the route forms (a list in a routes file, a comma list in proxai_key_env) and the
choice (round-robin, cooling keys skipped, the soonest reset when all cool)."""

from __future__ import annotations

import pytest

from proxai_mitm.config.routes import MAX_POOL, ConfigError, routes_from_options, routes_from_toml
from proxai_mitm.limits.pools import pick_key, pool_keys
from proxai_mitm.limits.store import ProcessStore, key_name

ENV = {"K1": "sk-key-one-0123456789", "K2": "sk-key-two-0123456789", "K3": "sk-key-three-0123456789",
       "EMPTY": " "}


def test_a_routes_file_takes_a_list_of_variables(tmp_path) -> None:
    p = tmp_path / "r.toml"
    p.write_text('[[routes]]\nname = "pool"\ntarget = { protocol = "anthropic_messages", '
                 'base_url = "https://api.anthropic.com", api_key_env = ["K1", "K2", "K3"] }\n'
                 '[[routes]]\nname = "one"\ntarget = { protocol = "openai_chat_completions", api_key_env = "K1" }\n'
                 '[[routes]]\nname = "listed-once"\ntarget = { protocol = "openai_chat_completions", '
                 'api_key_env = ["K2"] }\n')
    pool, one, once = routes_from_toml(p)
    assert pool.api_key_env == "K1" and pool.key_envs == ("K1", "K2", "K3")
    assert one.key_envs == ("K1",) and not one.key_pool
    assert once.api_key_env == "K2" and once.key_envs == ("K2",) and not once.key_pool


@pytest.mark.parametrize(("value", "message"), [
    ('["K1", "not a name"]', "must be an environment variable name, got 'not a name'"),
    ("[]", "a list of 1 to"),
    ('["K1", "K1"]', "a variable is named twice"),
    ("[" + ", ".join(f'"K{i}"' for i in range(MAX_POOL + 1)) + "]", "a list of 1 to"),
])
def test_a_bad_list_is_refused_naming_the_field(tmp_path, value: str, message: str) -> None:
    p = tmp_path / "r.toml"
    p.write_text(f'[[routes]]\nname = "pool"\ntarget = {{ protocol = "anthropic_messages", api_key_env = {value} }}\n')
    with pytest.raises(ConfigError) as e:
        routes_from_toml(p)
    assert "route 'pool' (routes[0]): target.api_key_env" in str(e.value) and message in str(e.value)


def test_the_option_takes_a_comma_list() -> None:
    (r,) = routes_from_options("anthropic_messages", "https://api.anthropic.com", " K1, K2 ,K3 ", "")
    assert r.api_key_env == "K1" and r.key_envs == ("K1", "K2", "K3")
    (r,) = routes_from_options("anthropic_messages", "", "K1", "")
    assert r.key_envs == ("K1",) and not r.key_pool
    with pytest.raises(ConfigError, match="proxai_key_env: must be an environment variable name"):
        routes_from_options("anthropic_messages", "", "K1,K-2", "")
    with pytest.raises(ConfigError, match="proxai_key_env: at most"):
        routes_from_options("anthropic_messages", "", "K1,K1", "")


def test_pool_keys_skip_unset_variables() -> None:
    assert pool_keys(("K1", "MISSING", "EMPTY", "K2"), ENV) == [("K1", ENV["K1"]), ("K2", ENV["K2"])]


def test_keys_are_taken_in_turn() -> None:
    s = ProcessStore()
    picks = [pick_key("r", ("K1", "K2", "K3"), s, environ=ENV, now=1000.0).env for _ in range(6)]
    assert picks == ["K1", "K2", "K3", "K1", "K2", "K3"]


def test_a_cooling_key_is_skipped_until_its_reset() -> None:
    s = ProcessStore()
    s.put(key_name(ENV["K2"]), 1010.0, 1000.0)
    picks = [pick_key("r", ("K1", "K2", "K3"), s, environ=ENV, now=1000.0).env for _ in range(4)]
    assert picks == ["K1", "K3", "K3", "K1"]  # K2's turn goes to the next key
    after = [pick_key("r", ("K1", "K2", "K3"), s, environ=ENV, now=1010.0).env for _ in range(3)]
    assert "K2" in after


def test_every_key_cooling_gives_the_soonest_reset() -> None:
    s = ProcessStore()
    s.put(key_name(ENV["K1"]), 1030.0, 1000.0)
    s.put(key_name(ENV["K2"]), 1012.5, 1000.0)
    pick = pick_key("r", ("K1", "K2"), s, environ=ENV, now=1000.0)
    assert (pick.key, pick.env, pick.wait) == (None, None, 12.5)


def test_no_variable_set_picks_nothing() -> None:
    pick = pick_key("r", ("MISSING", "EMPTY"), ProcessStore(), environ=ENV)
    assert (pick.key, pick.env, pick.wait) == (None, None, None)
