"""Routing options: parsed once in ``configure`` into a :class:`~.config.RouteSet` the router reads.

``proxai_target`` / ``proxai_upstream`` / ``proxai_key_env`` / ``proxai_model`` / ``proxai_auth`` make one route named
``default``; ``proxai_config`` (a TOML routes file) replaces them with several.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

from mitmproxy import ctx, exceptions

from proxai_core import Protocol

from .routes import ConfigError, RouteSet, routes_from_options, routes_from_toml

logger = logging.getLogger(__name__)

__all__ = ["RouteOptions", "check_deferred", "options_error", "preflight", "refuse_start", "starting"]

_ROUTE_OPTIONS = ("proxai_target", "proxai_upstream", "proxai_key_env", "proxai_model", "proxai_auth", "proxai_config")


def options_error(message: str) -> exceptions.OptionsError:
    """Log an ERROR line naming the option (mitmdump shows no other trace of a script option refused at
    start) and return the OptionsError to raise."""
    logger.error("proxai: invalid option %s", message)
    e = exceptions.OptionsError(f"proxai: {message}")
    e.proxai_logged = True  # type: ignore[attr-defined]
    return e


def starting() -> bool:
    """True while mitmproxy loads its scripts at start, before it runs; False once running, and
    outside a real mitmproxy (no script loader)."""
    try:
        loader = ctx.master.addons.get("scriptloader")
    except Exception:  # noqa: BLE001 - no master
        return False
    return loader is not None and not getattr(loader, "is_running", True)


def refuse_start(e: exceptions.OptionsError) -> NoReturn:
    """A bad option value at start: one error line and exit 1, before the proxy listens.

    mitmproxy loads scripts after its own option errors are handled: an OptionsError raised by a
    script is printed with a traceback and mitmdump starts listening before it exits. SystemExit is
    not caught by the script loader, so it ends mitmdump here."""
    # "proxai_x must be ..." -> "proxai_x: must be ...", as options_error words it
    line = "proxai: invalid option " + re.sub(r"^(proxai_\w+):? ", r"\1: ", str(e).removeprefix("proxai: "))
    if not getattr(e, "proxai_logged", False):
        logger.error("%s", line)
    if getattr(ctx.master.addons.get("errorcheck"), "repeat_errors_on_stderr", False):
        print(line, file=sys.stderr)  # the console UI keeps its log to itself, as mitmproxy's errorcheck knows
    raise SystemExit(1)


def check_deferred(bools: Iterable[str] = (), ints: Iterable[str] = ()) -> None:
    """Check the ``--set`` values of the named (just declared) options now; see :func:`preflight`."""
    _check_values([*bools, *ints])


def preflight() -> None:
    """Check every ``--set proxai_*`` value once all ProxAI options are declared (end of ``load``).

    mitmproxy parses the values of script options right after ``load``; a bad bool or int raises
    there and the script silently does not load (the proxy runs without it). A name no ProxAI addon
    declares stays deferred forever, silently. Both are refused here, naming the option."""
    opts = ctx.options
    unknown = sorted(n for n in opts.deferred if n.startswith("proxai_") and n not in opts)
    if unknown:
        _refuse(options_error(f"{', '.join(unknown)}: no such option (mitmdump --options lists them)"))
    _check_values([n for n in opts.deferred if n.startswith("proxai_")])


def _check_values(names: Iterable[str]) -> None:
    opts = ctx.options
    for name in names:
        raw = getattr(opts.deferred.get(name), "val", None)
        if raw is None or name not in opts:
            continue
        opt = opts._options[name]
        shown = f"={raw[-1]!r}" if len(raw) == 1 else f"={raw!r}" if raw else ""
        try:
            opts._parse_setval(opt, raw)  # what mitmproxy will do with it
        except exceptions.OptionsError as e:
            _refuse(options_error(f"{name}{shown}: {_expected(opt, raw, e)}"))
        # choices are checked by the addons' configure, with their own message


def _expected(opt: Any, raw: list[str], e: exceptions.OptionsError) -> str:
    if len(raw) != 1:
        return str(e)
    if opt.typespec is bool:
        return "expected true or false"
    if opt.typespec is int:
        return "expected a whole number"
    return str(e)


def _refuse(e: exceptions.OptionsError) -> None:
    if starting():
        refuse_start(e)
    raise e


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
            "Name of the environment variable holding the upstream API key (a comma list of names: a key "
            "pool, taken in turn). Required when proxai_upstream is another host than the client addressed "
            "(client keys are never forwarded there).",
        )
        loader.add_option(
            "proxai_model", str, "",
            "Upstream model: one name, or a map 'client=upstream,...' with globs and '*' as catch-all.",
        )
        loader.add_option(
            "proxai_auth", str, "",
            "Credential source of the upstream instead of proxai_key_env: aws[:profile][@region] (SigV4 by "
            "botocore), aws-bearer[:ENV] (a Bedrock API key), google (Application Default Credentials), "
            "bearer:ENV (a token from an environment variable).",
        )
        loader.add_option(
            "proxai_refusal_in_content", bool, False,
            "Chat Completions clients also get a translated refusal's text in message.content / "
            "delta.content (for clients that show only content, e.g. litellm-based ones); a route's "
            "refusal_in_content overrides it.",
        )
        loader.add_option(
            "proxai_redis", str, "",
            "A redis:// URL: cooldowns of limited keys and upstreams are shared with every mitmdump using "
            "the same Redis. Empty: they are kept in this process.",
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
                ignored = [o for o in _ROUTE_OPTIONS[:5] if getattr(opts, o)]
                if ignored:
                    logger.warning("proxai: proxai_config is set; ignoring %s", ", ".join(ignored))
            else:
                routes = routes_from_options(opts.proxai_target, opts.proxai_upstream, opts.proxai_key_env,
                                             opts.proxai_model, opts.proxai_auth)
                if not opts.proxai_target and (opts.proxai_upstream or opts.proxai_model or opts.proxai_key_env
                                               or opts.proxai_auth):
                    logger.warning("proxai: proxai_upstream / proxai_key_env / proxai_model / proxai_auth have "
                                   "no effect without proxai_target")
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
            unset = [e for e in r.key_envs if not os.environ.get(e)]
            if unset and len(unset) == len(r.key_envs):
                logger.warning("proxai: route %r: environment variable %s is not set; its requests will get 401",
                               r.name, ", ".join(unset))
            elif unset:
                logger.warning("proxai: route %r: key pool variable(s) %s not set; the pool goes without them",
                               r.name, ", ".join(unset))
        if not routes:
            logger.info("proxai: no routes; LLM flows pass through and are annotated")


def lazy_connections(why: str) -> None:
    """Switch mitmproxy to lazy upstream connections (eager ones go to the host the client named, and
    fail offline, before any request hook could answer)."""
    if getattr(ctx.options, "connection_strategy", "lazy") == "eager":
        ctx.options.update(connection_strategy="lazy")
        logger.info("proxai: connection_strategy set to lazy (%s)", why)
