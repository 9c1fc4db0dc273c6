"""options.py: routing options parsed once; errors name the option."""

from __future__ import annotations

import logging

import pytest
from mitmproxy import exceptions

from ..helpers import ANTH


def test_bad_option_logs_error_and_raises(addon, caplog):
    caplog.set_level(logging.ERROR)
    with pytest.raises(exceptions.OptionsError):
        addon.configure(proxai_target="anthropic")
    assert "proxai: invalid option proxai_target" in caplog.text


def test_bad_routes_file_names_route_and_field(addon, tmp_path, caplog):
    p = tmp_path / "r.toml"
    p.write_text('[[routes]]\nname = "x"\ntarget = { protocol = "nope" }\n')
    caplog.set_level(logging.ERROR)
    with pytest.raises(exceptions.OptionsError):
        addon.configure(proxai_config=str(p))
    assert "route 'x' (routes[0]): target.protocol" in caplog.text


def test_retargeting_sets_lazy_connection_strategy(addon):
    from mitmproxy import ctx

    ctx.options.add_option("connection_strategy", str, "eager", "normally declared by proxyserver")
    assert ctx.options.connection_strategy == "eager"
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com",
                         proxai_key_env="PROXAI_TEST_KEY")
    assert ctx.options.connection_strategy == "lazy"


def test_closed_sets_are_declared_as_choices(addon):
    from mitmproxy import ctx

    opts = ctx.options._options
    assert opts["proxai_target"].choices == ("", "openai_chat_completions", "openai_responses",
                                             "anthropic_messages", "gemini_generate_content", "bedrock_converse",
                                             "vertex_anthropic", "bedrock_invoke")
    assert opts["proxai_replay_miss"].choices == ("error", "forward")


def test_routes_parsed_once_in_configure(addon, monkeypatch):
    """The hooks read the parsed RouteSet; a change of an unrelated option does not re-parse."""
    import proxai_mitm.config.options as mod

    addon.configure(proxai_target="openai_chat_completions", proxai_model="x")
    routes = addon.routeoptions.routes
    assert [r.name for r in routes] == ["default"] and routes.routes[0].models.map("y") == "x"
    calls = []
    monkeypatch.setattr(mod, "routes_from_options", lambda *a: calls.append(a))
    addon.configure(proxai_redact=False)
    assert calls == [] and addon.routeoptions.routes is routes


@pytest.mark.parametrize("spec, says", [
    ("proxai_body_limit=abc", "proxai_body_limit='abc': expected a whole number"),
    ("proxai_redact=yes", "proxai_redact='yes': expected true or false"),  # mitmproxy's parser refuses it
    ("proxai_targt=openai_responses", "proxai_targt: no such option"),
])
def test_bad_set_values_are_refused_at_load(caplog, spec, says):
    """What mitmproxy would choke on right after load (silently not loading the script) is refused
    in load, naming the option; outside a starting mitmproxy that is an OptionsError."""
    from mitmproxy.test import taddons

    from proxai_mitm.addon import ProxAI

    caplog.set_level(logging.ERROR)
    with taddons.context() as tctx:
        tctx.options.set(spec, defer=True)
        with pytest.raises(exceptions.OptionsError):
            tctx.master.addons.register(ProxAI())
    assert f"proxai: invalid option {says}" in caplog.text
