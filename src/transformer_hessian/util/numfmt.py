"""How numbers print in the claims text and the tables: :func:`fmt` (3 significant digits),
:func:`fmt_pct` (a share as a percentage) and :func:`fmt_interval` (an interval next to the value
it is tested against). Free of torch and numpy so that every module can use it.

Three significant digits, trailing zeros kept (``0.500``, ``3.80``, ``929``), scientific notation
outside ``1e-4 <= |x| < 1000`` (``1.00e+04`` for 10017.6, ``1.00e-06`` for
``1.0000000000000002e-06``). A number is never printed as a reference value it is not equal to:
``fmt(-0.9996, avoid=-1)`` is ``-0.9996``, not ``-1.00``, and ``fmt_pct(0.99996)`` is
``99.996%``, not ``100%``; digits are added until the printed value differs from the reference.
Rounding is monotone and keeps the reference on its own grid, so the printed value is then on
the same side of the reference as the number itself.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

__all__ = ["fmt", "fmt_interval", "fmt_pct"]

#: Significant digits of :func:`fmt` unless a caller asks for more.
DIGITS = 3
#: The most digits :func:`fmt` adds to tell a number from its ``avoid`` value.
MAX_DIGITS = 17


def _g(x: float, digits: int) -> str:
    text = f"{x:#.{digits}g}"
    mantissa, e, exponent = text.partition("e")
    if mantissa.endswith("."):
        mantissa = mantissa[:-1]
    return mantissa + (e + exponent if e else "")


def fmt(x: object, digits: int = DIGITS, avoid: float | None = None) -> str:
    """``x`` with ``digits`` significant digits (integers and non-finite values as they are).

    With ``avoid``: more digits while the printed value equals ``avoid`` and ``x`` does not
    (at most :data:`MAX_DIGITS`). ``TypeError`` for anything that is not a real number."""
    if isinstance(x, bool) or not isinstance(x, Real):
        raise TypeError(f"fmt: expected a real number, got {type(x).__name__} {x!r}")
    if isinstance(x, Integral):
        return str(int(x))
    v = float(x)
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    if digits < 1:
        raise ValueError(f"fmt: digits must be >= 1, got {digits}")
    text = _g(v, digits)
    if avoid is not None and v != float(avoid):
        d = digits
        while float(text) == float(avoid) and d < MAX_DIGITS:
            d += 1
            text = _g(v, d)
    return text


def fmt_pct(fraction: float, digits: int = DIGITS) -> str:
    """A share in [0, 1] as a percentage with ``digits`` significant digits, never ``100%`` or
    ``0%`` unless it is exactly 1 or 0: ``fmt_pct(0.775921)`` is ``77.6%``."""
    f = float(fraction)
    if f in (0.0, 1.0):
        return f"{int(100 * f)}%"
    return fmt(100.0 * f, digits, avoid=100.0) + "%"


def fmt_interval(lo: float, hi: float, digits: int = DIGITS, reference: float | None = None) -> str:
    """``[lo, hi]`` with :func:`fmt`; with ``reference`` both ends get enough digits that none
    prints as the reference unless it equals it, so the printed interval contains the reference
    exactly when ``lo <= reference <= hi`` (``[-0.998, -0.975]``, never ``[-1.00, -0.975]``)."""
    return f"[{fmt(lo, digits, avoid=reference)}, {fmt(hi, digits, avoid=reference)}]"
