"""The figures every benchmark prints: nearest-rank percentiles and one aligned row per measurement."""

from __future__ import annotations

import math
import statistics


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile ``p`` (0-100) of ``samples``, in their unit."""
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def header(label_width: int = 34) -> str:
    return f"{'':<{label_width}}{'n':>5}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}"


def row(name: str, samples: list[float], label_width: int = 34) -> str:
    """``samples`` in seconds as a row of count, p50, p99 and max in milliseconds."""
    return (f"{name:<{label_width}}{len(samples):>5}{statistics.median(samples) * 1000:>10.0f}"
            f"{percentile(samples, 99) * 1000:>10.0f}{max(samples) * 1000:>10.0f}")
