"""Routing options: parsed once in ``configure`` into a :class:`~.config.RouteSet` the router reads.

``proxai_target`` / ``proxai_upstream`` / ``proxai_key_env`` / ``proxai_model`` make one route named
``default``; ``proxai_config`` (a TOML routes file) replaces them with several.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from mitmproxy import ctx, exceptions

from proxai_core import Protocol

from .config import ConfigError, RouteSet, routes_from_options, routes_from_toml

logger = logging.getLogger(__name__)

__all__ = ["RouteOptions", "check_deferred", "options_error"]

_ROUTE_OPTIONS = ("proxai_target", "proxai_upstream", "proxai_key_env", "proxai_model", "proxai_config")
_BOOL_WORDS = {"true", "false", "1", "0", "yes", "no", "on", "off", ""}


def options_error(message: str) -> exceptions.OptionsError:
    """Log an ERROR line naming the option (mitmdump shows no other trace of a script option refused at
    start) and return the OptionsError to raise."""
    logger.error("proxai: invalid option %s", message)
    return exceptions.OptionsError(f"proxai: {message}")


def check_deferred(bools: Iterable[str] = (), ints: Iterable[str] = ()) -> None:
    """mitmproxy parses ``--set`` values of script options after ``load``; a bad bool or int makes the
    script silently not load. Say so loudly, naming the option."""
    try:
        deferred = ctx.options.deferred
    except Exception:  # noqa: BLE001 - not available outside a master
        return
    for name in bools:
        raw = getattr(deferred.get(name), "val", None)
        if isinstance(raw, list) and raw and str(raw[-1]).strip().lower() not in _BOOL_WORDS:
            logger.error("proxai: invalid option %s=%r: expected true or false. "
                         "mitmproxy will not load the ProxAI addon until this is fixed.", name, raw[-1])
    for name in ints:
        raw = getattr(deferred.get(name), "val", None)
        if isinstance(raw, list) and raw and not str(raw[-1]).strip().lstrip("-").isdigit():
            logger.error("proxai: invalid option %s=%r: expected a whole number of seconds. "
                         "mitmproxy will not load the ProxAI addon until this is fixed.", name, raw[-1])


class RouteOptions:
    """Declares and parses the routing options; ``routes`` is what the router reads."""

    def __init__(self) -> None:
        self.routes = RouteSet()

    def load(self, loader: Any) -> None:
        loader.add_option(
            "proxai_target", str, "",
            "Translate every recognized LLM request to this protocol. Empty: no translation (flows are "
            "only annotated).",
            choices=("", *(p.value for p in Protocol)),
        )
        loader.add_option(
            "proxai_upstream", str, "",
            "Base URL of the upstream for proxai_target, e.g. https://api.anthropic.com. Empty: keep "
            "the request's own scheme, host and port (reverse mode, multi-protocol gateways).",
        )
        loader.add_option(
            "proxai_key_env", str, "",
            "Name of the environment variable holding the upstream API key. Required when "
            "proxai_upstream is another host than the client addressed (client keys are never forwarded there).",
        )
        loader.add_option(
            "proxai_model", str, "",
            "Upstream model: one name, or a map 'client=upstream,...' with globs and '*' as catch-all.",
        )
        loader.add_option(
            "proxai_refusal_in_content", bool, False,
            "Chat Completions clients also get a translated refusal's text in message.content / "
            "delta.content (for clients that show only content, e.g. litellm-based ones); a route's "
            "refusal_in_content overrides it.",
        )
        loader.add_option(
            "proxai_config", str, "",
            "A TOML routes file ([[routes]] with name, match and target). When set it replaces "
            "proxai_target / proxai_upstream / proxai_key_env / proxai_model.",
        )

    def configure(self, updated: set[str]) -> None:
        if not updated & set(_ROUTE_OPTIONS):
            return
        opts = ctx.options
        try:
            if opts.proxai_config:
                routes = routes_from_toml(opts.proxai_config)
                ignored = [o for o in _ROUTE_OPTIONS[:4] if getattr(opts, o)]
                if ignored:
                    logger.warning("proxai: proxai_config is set; ignoring %s", ", ".join(ignored))
            else:
                routes = routes_from_options(opts.proxai_target, opts.proxai_upstream, opts.proxai_key_env,
                                             opts.proxai_model)
                if not opts.proxai_target and (opts.proxai_upstream or opts.proxai_model or opts.proxai_key_env):
                    logger.warning("proxai: proxai_upstream / proxai_key_env / proxai_model have no effect "
                                   "without proxai_target")
        except ConfigError as e:
            raise options_error(str(e)) from None
        changed = routes != self.routes
        self.routes = routes
        if routes.retargets:
            # eager would connect to the host the client named before the request hook retargets it
            lazy_connections("routes send requests to other hosts")
        if changed:
            self._describe(routes)

    @staticmethod
    def _describe(routes: RouteSet) -> None:
        for r in routes:
            logger.info("proxai: %s", r.describe())
            if r.api_key_env and not os.environ.get(r.api_key_env):
                logger.warning("proxai: route %r: environment variable %s is not set; its requests will get 401",
                               r.name, r.api_key_env)
        if not routes:
            logger.info("proxai: no routes; LLM flows pass through and are annotated")


def lazy_connections(why: str) -> None:
    """Switch mitmproxy to lazy upstream connections (eager ones go to the host the client named, and
    fail offline, before any request hook could answer)."""
    if getattr(ctx.options, "connection_strategy", "lazy") == "eager":
        ctx.options.update(connection_strategy="lazy")
        logger.info("proxai: connection_strategy set to lazy (%s)", why)
