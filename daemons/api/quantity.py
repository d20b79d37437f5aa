"""Kubernetes resource quantities ("100m", "1.5", "64Mi", "2G") as plain numbers.

The scheduler sums requests with them and the kubelet turns limits into Docker's
CPU quota and memory limit, so both read quantities the same way.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]*)$")


def parse_quantity(value: str | int | float) -> Decimal:
    """The quantity's value in base units (cores, bytes); ``ValueError`` names what is wrong."""
    if isinstance(value, bool):
        raise ValueError(f"quantity {value!r} must be a number or a string such as '100m' or '64Mi'")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(f"quantity {value!r} must match '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', "
                         "e.g. '100m', '1.5', '64Mi'")
    try:
        return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]
    except InvalidOperation:
        raise ValueError(f"quantity {value!r} is not a number") from None


def cpu_millis(value: str | int | float) -> int:
    """CPU in millicores, rounded up as Kubernetes does (``"0.1"`` → 100, ``"1"`` → 1000)."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def memory_bytes(value: str | int | float) -> int:
    """Memory in bytes, rounded up (``"64Mi"`` → 67108864)."""
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


def format_cpu(millis: int) -> str:
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


def format_memory(size: int) -> str:
    for suffix in ("Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)
