"""Cost in USD of one exchange, from the ``genai-prices`` database (the snapshot shipped with the
package: nothing is fetched at run time).

The price is looked up for the model that answered (else the model sent upstream), at the provider
the upstream host belongs to when the database knows the host, else the provider the model name
matches. An unknown model or missing token counts give ``None`` (shown as "unknown"), never 0.
"""

from __future__ import annotations

import functools
import logging
import warnings
from dataclasses import dataclass

logger = logging.getLogger(__name__)

__all__ = ["Cost", "price"]


@dataclass(frozen=True, slots=True)
class Cost:
    usd: float | None
    #: the price entry used (database model id) and its provider, or why there is no price
    model: str | None = None
    provider: str | None = None
    note: str | None = None


def price(model: str | None, host: str | None, *, input_total: int | None, output: int | None,
          cache_read: int | None = None, cache_write: int | None = None) -> Cost:
    """The cost of one exchange. ``input_total`` counts every input token (cached ones included),
    ``output`` every output token (reasoning included), as the providers bill them."""
    if not model:
        return Cost(None, note="model unknown")
    if input_total is None and output is None:
        return Cost(None, note="token counts unknown")
    return _price(model, (host or "").lower(), input_total or 0, output or 0, cache_read or 0, cache_write or 0)


@functools.lru_cache(maxsize=4096)
def _price(model: str, host: str, inp: int, out: int, cread: int, cwrite: int) -> Cost:
    try:
        import genai_prices
    except ImportError:  # declared as a dependency; a broken install must not break the proxy
        return Cost(None, note="genai-prices not installed")
    usage = genai_prices.Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cread or None,
                               cache_write_tokens=cwrite or None)
    attempts: list[dict[str, str]] = [{"provider_api_url": f"https://{host}"}] if host else []
    attempts.append({})
    for kw in attempts:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                calc = genai_prices.calc_price(usage, model, **kw)
        except LookupError:
            continue
        except Exception as e:  # noqa: BLE001 - a database oddity must not break the flow
            logger.debug("proxai: price lookup failed for %r: %s", model, e)
            return Cost(None, note=f"price lookup failed: {e}")
        return Cost(float(calc.total_price), model=calc.model.id, provider=calc.provider.id)
    return Cost(None, note=f"no price known for {model}")
