"""Options and the routes file: parsed and validated once, in ``configure``.

A route says which recognized LLM requests it takes (``match``: host, path, model globs) and where
they go (``target``: protocol, base URL, key variable, model mapping). The four ``proxai_*`` options
make one route named ``"default"``; ``proxai_config`` (a TOML file) makes several. First match wins.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from proxai_core import Protocol

from .smallfile import SmallFileError, nesting_depth, read_small_file

__all__ = [
    "ConfigError",
    "ModelMap",
    "Route",
    "RouteSet",
    "parse_base_url",
    "parse_model_map",
    "routes_from_options",
    "routes_from_toml",
]

PROTOCOLS = tuple(p.value for p in Protocol)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigError(ValueError):
    """A bad option value or routes file. The message names the option / route and field."""


# ----------------------------------------------------------------------------- model map
@dataclass(frozen=True, slots=True)
class ModelMap:
    """``client model -> upstream model``. Entries are globs; ``*`` is the catch-all.

    A single name (no ``=``) maps every model. No match keeps the client's model.
    """

    entries: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def map(self, model: str | None) -> str | None:
        for pattern, upstream in self.entries:
            if pattern == "*" or (model is not None and fnmatch.fnmatchcase(model, pattern)):
                return upstream
        return model

    def reverse(self, upstream: str) -> list[str]:
        """Client names (without globs) that map to ``upstream``."""
        return [p for p, u in self.entries if u == upstream and not _is_glob(p)]

    def client_names(self) -> list[str]:
        """Names a client may ask for explicitly (the non-glob keys), in order."""
        return [p for p, _ in self.entries if not _is_glob(p)]

    def to_text(self) -> str:
        return ",".join(f"{p}={u}" for p, u in self.entries)


def _is_glob(s: str) -> bool:
    return any(c in s for c in "*?[")


def parse_model_map(value: Any, where: str = "model") -> ModelMap:
    """``"name"`` | ``"a=b,c*=d,*=e"`` | ``{"a": "b", "*": "e"}`` (TOML table)."""
    if value is None or value == "":
        return ModelMap()
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, str):
        text = value.strip()
        if "=" not in text:
            if "," in text or not text:
                raise ConfigError(f"{where}: expected one model name or 'client=upstream,...', got {value!r}")
            return ModelMap((("*", text),))
        items = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            client, sep, upstream = part.partition("=")
            if not sep:
                raise ConfigError(
                    f"{where}: entry {part!r} has no '='; write 'client=upstream' (or '*=upstream' as catch-all)"
                )
            items.append((client.strip(), upstream.strip()))
    else:
        raise ConfigError(f"{where}: expected a string or a table, got {type(value).__name__}")
    entries = []
    for client, upstream in items:
        if not isinstance(client, str) or not client or not isinstance(upstream, str) or not upstream:
            raise ConfigError(f"{where}: empty model name in {client!r}={upstream!r}")
        entries.append((client, upstream))
    # the catch-all goes last whatever its position, so specific entries win
    entries.sort(key=lambda e: e[0] == "*")
    return ModelMap(tuple(entries))


# ----------------------------------------------------------------------------- base URL
@dataclass(frozen=True, slots=True)
class BaseURL:
    scheme: str
    host: str
    port: int
    path: str  # without trailing slash; "" for none
    query: str

    @property
    def authority(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        q = f"?{self.query}" if self.query else ""
        return f"{self.scheme}://{self.authority}{self.path}{q}"


def parse_base_url(value: str, where: str = "base_url") -> BaseURL:
    try:
        u = urlsplit(value.strip())
        port = u.port
    except ValueError as e:
        raise ConfigError(f"{where}: {value!r} is not a URL ({e})") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ConfigError(f"{where}: {value!r} must look like https://host[:port][/prefix]")
    if u.username or u.password:
        raise ConfigError(f"{where}: put no credentials in the URL; use api_key_env / proxai_key_env")
    if port is None:
        port = 443 if u.scheme == "https" else 80
    return BaseURL(u.scheme, u.hostname, port, u.path.rstrip("/"), u.query)


# ----------------------------------------------------------------------------- routes file schema
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MatchSpec(_Strict):
    host: str | None = None
    path: str | None = None
    model: str | None = None


class TargetSpec(_Strict):
    protocol: str
    base_url: str | None = None
    api_key_env: str | None = None
    model: str | dict[str, str] | None = None

    @field_validator("protocol")
    @classmethod
    def _protocol(cls, v: str) -> str:
        if v not in PROTOCOLS:
            raise ValueError(f"must be one of {', '.join(PROTOCOLS)}, got {v!r}")
        return v

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str | None) -> str | None:
        if v:
            try:
                parse_base_url(v)
            except ConfigError as e:
                raise ValueError(str(e).removeprefix("base_url: ")) from None
        return v or None

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v and not _ENV_NAME.match(v):
            raise ValueError(f"must be an environment variable name, got {v!r}")
        return v or None

    @field_validator("model")
    @classmethod
    def _model(cls, v: Any) -> Any:
        try:
            parse_model_map(v)
        except ConfigError as e:
            raise ValueError(str(e).removeprefix("model: ")) from None
        return v


class RouteSpec(_Strict):
    name: str
    match: MatchSpec = MatchSpec()
    target: TargetSpec
    #: Chat clients that ignore ``refusal`` (a translated refusal also in ``content``); unset: the option
    refusal_in_content: bool | None = None
    #: the target's prompt-caching hints on translated requests; unset: wherever the target is known
    #: to take them (all but a Chat server that is not OpenAI's)
    cache_hints: bool | None = None


class RoutesFile(_Strict):
    routes: list[dict[str, Any]]


# ----------------------------------------------------------------------------- runtime route
@functools.lru_cache(maxsize=512)
def _glob(pattern: str) -> Callable[[str], re.Match[str] | None]:
    """The matcher of a shell-style pattern, case-sensitive (``fnmatch.fnmatchcase``), compiled once
    per pattern (a route is matched against every request)."""
    return re.compile(fnmatch.translate(pattern)).match


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    protocol: Protocol
    base_url: BaseURL | None = None
    api_key_env: str | None = None
    models: ModelMap = field(default_factory=ModelMap)
    match_host: str | None = None
    match_path: str | None = None
    match_model: str | None = None
    #: a Chat client also gets a refusal's text in ``content`` (None: the proxai_refusal_in_content option)
    refusal_in_content: bool | None = None
    #: prompt-caching hints on translated requests: True on, False off, None where known to be taken
    cache_hints: bool | None = None

    def matches(self, host: str, path: str, model: str | None, *, alt_paths: tuple[str, ...] = ()) -> bool:
        """``alt_paths``: for auxiliary endpoints (``/models``, ``count_tokens``) the generation paths
        they accompany; the path condition holds if any of them matches."""
        if self.match_host and _glob(self.match_host.lower())(host.lower()) is None:
            return False
        if self.match_path:
            match = _glob(self.match_path)
            if not any(match(p) is not None for p in alt_paths or (path,)):
                return False
        if self.match_model and model is not None and _glob(self.match_model)(model) is None:
            return False
        if self.match_model and model is None and not alt_paths:
            return False
        return True

    def describe(self) -> str:
        where = f" at {self.base_url}" if self.base_url else ""
        models = f", model {self.models.to_text()}" if self.models else ""
        return f"route {self.name!r}: → {self.protocol.value}{where}{models}"


@dataclass(frozen=True, slots=True)
class RouteSet:
    routes: tuple[Route, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.routes)

    def __len__(self) -> int:
        return len(self.routes)

    def __iter__(self):
        return iter(self.routes)

    def find(self, host: str, path: str, model: str | None, *, alt_paths: tuple[str, ...] = ()) -> Route | None:
        for r in self.routes:
            if r.matches(host, path, model, alt_paths=alt_paths):
                return r
        return None

    @property
    def retargets(self) -> bool:
        return any(r.base_url is not None for r in self.routes)


def routes_from_options(target: str, upstream: str, key_env: str, model: str) -> RouteSet:
    """The four single-rule options. Raises ConfigError naming the option."""
    target = (target or "").strip()
    if not target:
        return RouteSet()
    if target not in PROTOCOLS:
        raise ConfigError(f"proxai_target: must be one of {', '.join(PROTOCOLS)} (or empty), got {target!r}")
    base = parse_base_url(upstream, "proxai_upstream") if upstream and upstream.strip() else None
    key_env_name = (key_env or "").strip() or None
    if key_env_name and not _ENV_NAME.match(key_env_name):
        raise ConfigError(f"proxai_key_env: must be an environment variable name, got {key_env_name!r}")
    models = parse_model_map(model, "proxai_model")
    return RouteSet((Route("default", Protocol(target), base, key_env_name, models),))


def _loc(loc: tuple) -> str:
    return ".".join(str(x) for x in loc)


#: a routes file is a few routes; anything larger is a mistake (or not a routes file at all)
MAX_ROUTES_FILE = 1024 * 1024
#: tables and arrays nested deeper than this are refused (a route needs 3 levels)
MAX_ROUTES_DEPTH = 16


def routes_from_toml(path: str | os.PathLike) -> RouteSet:
    """Read and validate a routes file. Errors name the file, the route (name and index) and field."""
    p = Path(path).expanduser()
    try:
        raw = read_small_file(p, MAX_ROUTES_FILE, "proxai_config")
    except SmallFileError as e:
        raise ConfigError(str(e)) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        hint = ""
        if any(ln.count("{") > ln.count("}") for ln in raw.decode("utf-8", "replace").splitlines()):
            hint = (" (inline tables { ... } must be on one line in TOML 1.0; "
                    "for longer ones write a [routes.target] table)")
        raise ConfigError(f"proxai_config: {p}: invalid TOML: {e}{hint}") from None
    except RecursionError:  # the TOML parser recurses once per nested array / inline table
        raise ConfigError(f"proxai_config: {p}: nested more than {MAX_ROUTES_DEPTH} levels deep") from None
    if nesting_depth(data, MAX_ROUTES_DEPTH) > MAX_ROUTES_DEPTH:
        raise ConfigError(f"proxai_config: {p}: nested more than {MAX_ROUTES_DEPTH} levels deep")
    extra = sorted(set(data) - {"routes"})
    if extra:
        raise ConfigError(f"proxai_config: {p}: unknown top-level key(s) {', '.join(extra)}; expected [[routes]]")
    items = data.get("routes")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"proxai_config: {p}: no routes; add at least one [[routes]] table")
    routes: list[Route] = []
    names: set[str] = set()
    for i, item in enumerate(items):
        label_name = item.get("name") if isinstance(item, dict) else None
        label = f"route {label_name!r} (routes[{i}])" if isinstance(label_name, str) else f"routes[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"proxai_config: {p}: {label}: must be a table")
        try:
            spec = RouteSpec.model_validate(item)
        except ValidationError as e:
            msgs = []
            for err in e.errors():
                field_name = _loc(err["loc"]) or "route"
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] == "extra_forbidden":
                    msg = "unknown field"
                elif err["type"] == "missing":
                    msg = "required field missing"
                msgs.append(f"{field_name}: {msg}")
            raise ConfigError(f"proxai_config: {p}: {label}: " + "; ".join(msgs)) from None
        if spec.name in names:
            raise ConfigError(f"proxai_config: {p}: {label}: name: duplicate route name {spec.name!r}")
        names.add(spec.name)
        t = spec.target
        routes.append(
            Route(
                name=spec.name,
                protocol=Protocol(t.protocol),
                base_url=parse_base_url(t.base_url) if t.base_url else None,
                api_key_env=t.api_key_env,
                models=parse_model_map(t.model),
                match_host=spec.match.host,
                match_path=spec.match.path,
                match_model=spec.match.model,
                refusal_in_content=spec.refusal_in_content,
                cache_hints=spec.cache_hints,
            )
        )
    return RouteSet(tuple(routes))
