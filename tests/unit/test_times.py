"""API times: what Kubernetes writes (Time, MicroTime), what we accept, and kubectl's durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from daemons.api.times import age, human_duration, parse_time, rfc3339, rfc3339_micro

pytestmark = pytest.mark.unit

MOMENT = datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def test_rfc3339_writes_utc_seconds_with_z_as_metadata_times():
    assert rfc3339(MOMENT) == "2024-01-02T03:04:05Z"
    assert rfc3339(MOMENT.astimezone(timezone(timedelta(hours=2)))) == "2024-01-02T03:04:05Z"
    assert rfc3339(datetime(2024, 1, 2, 3, 4, 5)) == "2024-01-02T03:04:05Z"  # naive counts as UTC


def test_rfc3339_without_a_moment_is_now():
    before = datetime.now(UTC).replace(microsecond=0)
    written = parse_time(rfc3339())
    assert written is not None and before <= written <= datetime.now(UTC)


def test_micro_time_keeps_microseconds_as_leases_do():
    assert rfc3339_micro(MOMENT) == "2024-01-02T03:04:05.678901Z"


@pytest.mark.parametrize(("text", "expected"), [
    ("2024-01-02T03:04:05Z", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("2024-01-02T03:04:05.678901Z", MOMENT),
    ("2024-01-02T03:04:05.678901234Z", MOMENT),  # Go's RFC3339Nano
    ("2024-01-02T05:04:05+02:00", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("2024-01-02T03:04:05", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("", None), (None, None), ("yesterday", None),
])
def test_parse_time_accepts_what_clients_send(text, expected):
    assert parse_time(text) == expected


def test_written_times_read_back():
    assert parse_time(rfc3339(MOMENT)) == MOMENT.replace(microsecond=0)
    assert parse_time(rfc3339_micro(MOMENT)) == MOMENT


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "<invalid>"), (-1, "0s"), (-0.5, "0s"), (0, "0s"), (5, "5s"), (119.9, "119s"), (125, "2m5s"), (180, "3m"),
    (600, "10m"), (3 * 3600, "3h"), (3 * 3600 + 120, "3h2m"), (9 * 3600, "9h"), (30 * 3600, "30h"),
    (50 * 3600, "2d2h"), (3 * 86400 + 4 * 3600, "3d4h"), (10 * 86400, "10d"), (800 * 86400, "2y70d"),
    (3 * 365 * 86400 + 86400, "3y1d"), (9 * 365 * 86400, "9y"),
])
def test_human_duration_matches_kubectl(seconds, text):
    assert human_duration(seconds) == text


def test_age_from_timestamp():
    now = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert age("2024-01-01T11:55:00Z", now) == "5m"
    assert age(None, now) == "<unknown>"
