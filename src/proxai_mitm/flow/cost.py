"""Cost in USD of one exchange, from the ``genai-prices`` database (the snapshot shipped with the
package: nothing is fetched at run time).

The price is looked up for the model that answered (else the model sent upstream), at the provider
the upstream host belongs to when the database knows the host, else the provider the model name
matches. An unknown model or missing token counts give ``None`` (shown as "unknown"), never 0.

The database is one 1.6 MB Python module. Compiling it costs ~0.35 s and ~80 MB of peak memory (which
the allocator keeps: +45 MB of idle RSS), so it is never compiled inside the proxy when Python keeps no
bytecode for it (``PYTHONDONTWRITEBYTECODE``, read-only site-packages): a child process compiles it
once into ProxAI's cache directory, and the proxy runs the cached code (~30 ms, ~3 MB).
:func:`load_prices` does that (from a worker thread: :func:`start_loading`); :func:`prices_ready`
tells the hooks whether :func:`price` would have to wait for it.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import importlib.util
import logging
import marshal
import os
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..wire.bodies import release_memory

logger = logging.getLogger(__name__)

__all__ = ["Cost", "load_prices", "price", "prices_ready", "start_loading"]

_DATA_MODULE = "genai_prices.data"
_LOAD_LOCK = threading.Lock()
_READY = threading.Event()
_loader: threading.Thread | None = None


@dataclass(frozen=True, slots=True)
class Cost:
    usd: float | None
    #: the price entry used (database model id) and its provider, or why there is no price
    model: str | None = None
    provider: str | None = None
    note: str | None = None


def price(model: str | None, host: str | None, *, input_total: int | None, output: int | None,
          cache_read: int | None = None, cache_write: int | None = None, vendor: str | None = None) -> Cost:
    """The cost of one exchange. ``input_total`` counts every input token (cached ones included),
    ``output`` every output token (reasoning included), as the providers bill them."""
    if not model:
        return Cost(None, note="model unknown")
    if input_total is None and output is None:
        return Cost(None, note="token counts unknown")
    if not _READY.is_set():
        load_prices()  # live hooks wait for prices_ready() first; this is for readers and tests
    return _price(model, (host or "").lower(), input_total or 0, output or 0, cache_read or 0, cache_write or 0,
                  vendor or "")


#: token prices per million the fast path computes itself (any other price of the entry: slow path)
_TOKEN_KEYS = ("input_mtok", "cache_read_mtok", "cache_write_mtok", "output_mtok")


def _price(model: str, host: str, inp: int, out: int, cread: int, cwrite: int, vendor: str = "") -> Cost:
    entry = _entry(model, host, _dt.date.today().isoformat(), vendor)
    if isinstance(entry, str):
        return Cost(None, note=entry)
    mp, model_id, provider_id, fast = entry
    if fast:
        usd = _fast(mp, inp, out, cread, cwrite)
    else:
        try:
            usd = float(mp.calc_price(_usage(inp, out, cread, cwrite))["total_price"])
        except Exception as e:  # noqa: BLE001 - a database oddity must not break the flow
            logger.debug("proxai: price computation failed for %r: %s", model, e)
            return Cost(None, note=f"price computation failed: {e}")
    return Cost(usd, model=model_id, provider=provider_id)


def _usage(inp: int, out: int, cread: int, cwrite: int) -> Any:
    import genai_prices

    return genai_prices.Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cread or None,
                              cache_write_tokens=cwrite or None)


def _unit(price: Any, total_input: int) -> float:
    """A price per million tokens; a tiered one applies its highest tier below the input size to all
    tokens (the providers' "cliff" pricing, as genai-prices computes it)."""
    if price is None:
        return 0.0
    tiers = getattr(price, "tiers", None)
    if tiers is None:
        return float(price)
    applicable = price.base
    for tier in reversed(tiers):
        if total_input > tier.start:
            applicable = tier.price
            break
    return float(applicable)


def _fast(mp: Any, inp: int, out: int, cread: int, cwrite: int) -> float:
    """Per-token prices summed as genai-prices does, without its generic unit machinery (~0.6 ms a
    call: too much for every flow on the event loop). Cached tokens without a price of their own are
    priced as input."""
    p = mp.__dict__
    fresh = max(inp - cread - cwrite, 0)
    in_price = p.get("input_mtok")
    read = p.get("cache_read_mtok") if p.get("cache_read_mtok") is not None else in_price
    write = p.get("cache_write_mtok") if p.get("cache_write_mtok") is not None else in_price
    total = (fresh * _unit(in_price, inp) + cread * _unit(read, inp) + cwrite * _unit(write, inp)
             + out * _unit(p.get("output_mtok"), inp))
    return total / 1_000_000


@functools.lru_cache(maxsize=1024)
def _entry(model: str, host: str, day: str, vendor: str = "") -> tuple[Any, str, str, bool] | str:
    """The price entry of a model at a host (cached per day: prices can change by date), or why there is
    none; ``vendor`` (the protocol's, e.g. ``aws``) names the provider where the host does not (a
    gateway, a loopback reverse proxy) and the model id is the provider's own (``us.anthropic.…-v1:0``).
    ``fast``: the fast sum gives genai-prices' own result for this entry (checked once)."""
    try:
        import genai_prices  # noqa: F401
        from genai_prices import data_snapshot
    except ImportError:  # declared as a dependency; a broken install must not break the proxy
        return "genai-prices not installed"
    snap = data_snapshot.get_snapshot()
    attempts: list[tuple[str | None, str | None]] = [(None, f"https://{host}")] if host else []
    if vendor:
        attempts.append((vendor, None))
    attempts.append((None, None))
    for provider_id, url in attempts:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                provider, info = snap.find_provider_model(model, None, provider_id, url)
                mp = info.get_prices(_dt.datetime.now(tz=_dt.UTC))
        except LookupError:
            continue
        except Exception as e:  # noqa: BLE001
            logger.debug("proxai: price lookup failed for %r: %s", model, e)
            return f"price lookup failed: {e}"
        return mp, info.id, provider.id, _fast_ok(mp)
    return f"no price known for {model}"


def _fast_ok(mp: Any) -> bool:
    """The fast sum may be used for this entry: only token prices (and search prices, never used by
    these requests), and it gives genai-prices' own result on probes below and above the tiers."""
    keys = {k for k, v in mp.__dict__.items() if v is not None and not k.startswith("_")}
    if not keys <= set(_TOKEN_KEYS) | {"cache_write_1h_mtok", "web_searches_kcount", "storage_searches_kcount"}:
        return False
    try:
        for probe in ((10_000, 2_000, 3_000, 1_000), (1_000_000, 200_000, 300_000, 100_000)):
            slow = float(mp.calc_price(_usage(*probe))["total_price"])
            if abs(_fast(mp, *probe) - slow) > 1e-9 * max(1.0, slow):
                return False
    except Exception:  # noqa: BLE001
        return False
    return True


# ----------------------------------------------------------------------------- loading the database
def prices_ready() -> bool:
    """The database is loaded (or failed to): :func:`price` answers without waiting."""
    return _READY.is_set()


def start_loading() -> None:
    """Load the database in a daemon thread (once); :func:`prices_ready` turns true when done."""
    global _loader
    with _LOAD_LOCK:
        if _READY.is_set() or _loader is not None:
            return
        _loader = threading.Thread(target=load_prices, name="proxai-prices", daemon=True)
    _loader.start()


def load_prices() -> None:
    """Import the genai-prices database from cached bytecode (see the module docstring), else by the
    ordinary import. Never raises."""
    with _LOAD_LOCK:
        if _READY.is_set():
            return
        t0 = time.perf_counter()
        try:
            how = _install_data_module()
        except Exception:  # noqa: BLE001 - the price is optional
            logger.debug("proxai: loading the price database from cached bytecode failed", exc_info=True)
            try:
                __import__(_DATA_MODULE)  # the ordinary import, still off the event loop
            except Exception:  # noqa: BLE001 - _entry reports the missing price
                logger.debug("proxai: importing the price database failed", exc_info=True)
        else:
            logger.debug("proxai: price database loaded in %.0f ms (%s)", (time.perf_counter() - t0) * 1000, how)
        finally:
            _READY.set()
    release_memory()  # the loader's garbage (and its thread's arena) back to the OS


def _install_data_module() -> str:
    """Import the database module; returns how (for the log line)."""
    if _DATA_MODULE in sys.modules:
        return "already imported"
    try:
        spec = importlib.util.find_spec(_DATA_MODULE)
    except ImportError:
        return "genai-prices not installed"  # _entry says so
    origin = spec.origin if spec is not None else None
    if spec is None or not origin or not origin.endswith(".py"):
        __import__(_DATA_MODULE)
        return "ordinary import"
    pyc = importlib.util.cache_from_source(origin)
    if _newer(pyc, origin) or getattr(sys, "frozen", False):
        __import__(_DATA_MODULE)  # Python's own bytecode is there (or no interpreter to spawn)
        return "Python's bytecode cache"
    code, how = _cached_code(origin)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_DATA_MODULE] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        del sys.modules[_DATA_MODULE]
        raise
    return how


def _newer(a: str, b: str) -> bool:
    try:
        return os.stat(a).st_mtime_ns >= os.stat(b).st_mtime_ns
    except OSError:
        return False


def cache_dir() -> Path:
    """ProxAI's cache directory: ``$XDG_CACHE_HOME/proxai`` (default ``~/.cache/proxai``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "proxai"


def _cached_code(origin: str) -> tuple[Any, str]:
    """The compiled database from the cache, compiled by a child process when missing or stale
    (the key covers the interpreter and the source file, as Python's own bytecode cache does)."""
    st = os.stat(origin)
    key = hashlib.sha256(f"{sys.version}|{importlib.util.MAGIC_NUMBER.hex()}|{origin}|{st.st_size}|"
                         f"{st.st_mtime_ns}".encode()).hexdigest()[:20]
    path = cache_dir() / f"genai-prices-data-{key}.marshal"
    try:
        return marshal.loads(path.read_bytes()), f"cached bytecode {path}"
    except (OSError, EOFError, ValueError, TypeError):
        pass
    data = subprocess.run(  # -I: the child reads no PYTHON* variable, user site or working directory
        [sys.executable, "-I", "-c", _COMPILE, origin], capture_output=True, timeout=120, check=True,
        stdin=subprocess.DEVNULL,
    ).stdout
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # atomic: another proxy never reads half a file
    except OSError:
        logger.debug("proxai: cannot cache the compiled price database in %s", path.parent)
    return marshal.loads(data), f"compiled by a child process into {path}"


#: run by the child: compile the source file given as argument, write the code object to stdout
_COMPILE = ("import marshal, sys\n"
            "src = open(sys.argv[1], 'rb').read()\n"
            "sys.stdout.buffer.write(marshal.dumps(compile(src, sys.argv[1], 'exec', dont_inherit=True)))\n")
