"""Numbers and durations as the rebalancer's audit records write them."""

from __future__ import annotations

import math

__all__ = ["duration", "number"]


def number(value: float) -> str:
    """91.0, 0.93, 4.25, 1.2e+03: one decimal for the large, three significant digits for the small."""
    if not math.isfinite(value):
        return str(value)
    if 10 <= abs(value) < 1000:
        return f"{value:.1f}"
    return f"{value:.3g}"


def duration(seconds: float) -> str:
    """45s, 6m, 6m30s, 2h, 1h5m: whole seconds, the largest two units."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"
