"""Times as the Kubernetes API writes and reads them, and kubectl's short durations.

metav1.Time is RFC 3339 in UTC to the second with a ``Z`` (metadata times, conditions); metav1.MicroTime adds
microseconds (Events' eventTime, Leases' acquireTime/renewTime). Readers accept either, and offsets.
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(moment: datetime | None = None) -> str:
    """metav1.Time: ``2024-01-02T03:04:05Z``; now when no moment is given (a naive moment counts as UTC)."""
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: datetime | None = None) -> str:
    """metav1.MicroTime: ``2024-01-02T03:04:05.123456Z``, as Leases and Events carry it."""
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc(moment: datetime | None) -> datetime:
    if moment is None:
        return datetime.now(UTC)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 timestamp (``Z`` or an offset, with or without fractional seconds) as an aware datetime;
    None when missing or unreadable, so one bad field does not stop a controller."""
    if not value or not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``, kubectl's AGE and describe's ages: 45s, 3m20s, 12m, 5h3m, 9h,
    3d4h, 20d, 2y30d, 9y. Up to a second in the future reads ``0s`` (clock skew), further is ``<invalid>``."""
    whole = int(seconds)  # truncated toward zero, as Go's int(d.Seconds())
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes, hours = whole // 60, whole // 3600
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(timestamp: str | None, now: datetime) -> str:
    """How long before ``now`` an RFC 3339 timestamp was, as kubectl's AGE; ``<unknown>`` without one."""
    then = parse_time(timestamp)
    return human_duration((now - then).total_seconds()) if then else "<unknown>"
