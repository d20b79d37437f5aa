"""Cron schedules, the missed-run rule and the CronJob controller's decisions, with explicit times."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from daemons.api.kinds import cronjob as cronjob_kind
from daemons.api.kinds.cronjob import ScheduleError, parse_schedule
from daemons.controllers.cronjob import (
    SCHEDULED_TIMESTAMP_ANNOTATION,
    job_for,
    job_name,
    most_recent_time,
    plan,
)

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
T0 = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)  # a Friday


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def following(schedule: str, moment: datetime, count: int = 1) -> list[datetime]:
    parsed = parse_schedule(schedule)
    found = []
    for _ in range(count):
        found.append(parsed.next_after(moment))
        moment = found[-1]
    return found


@pytest.mark.parametrize(("schedule", "after", "expected"), [
    ("*/1 * * * *", T0, T0 + timedelta(minutes=1)),
    ("*/15 * * * *", T0 + timedelta(minutes=1), T0 + timedelta(minutes=15)),
    ("30 9-17 * * MON-FRI", T0, T0.replace(hour=9, minute=30)),
    ("0 0 * * sun", T0, datetime(2027, 1, 17, tzinfo=UTC)),
    ("0 12 1 * *", T0, datetime(2027, 2, 1, 12, tzinfo=UTC)),
    ("0 0 29 2 *", T0, datetime(2028, 2, 29, tzinfo=UTC)),
    ("5,10 3 * JAN,mar *", T0, datetime(2027, 1, 16, 3, 5, tzinfo=UTC)),
    ("10/20 * * * *", T0, T0.replace(minute=10)),
    ("@hourly", T0, T0 + timedelta(hours=1)),
    ("@daily", T0, datetime(2027, 1, 16, tzinfo=UTC)),
    ("@midnight", T0, datetime(2027, 1, 16, tzinfo=UTC)),
    ("@weekly", T0, datetime(2027, 1, 17, tzinfo=UTC)),
    ("@monthly", T0, datetime(2027, 2, 1, tzinfo=UTC)),
    ("@yearly", T0, datetime(2028, 1, 1, tzinfo=UTC)),
    ("@annually", T0, datetime(2028, 1, 1, tzinfo=UTC)),
])
def test_next_time(schedule: str, after: datetime, expected: datetime) -> None:
    assert following(schedule, after) == [expected]


def test_restricted_day_of_month_and_weekday_fire_on_either() -> None:
    # The 20th (a Wednesday) or any Monday, as cron reads both fields restricted.
    assert following("0 0 20 * MON", T0, 3) == [datetime(2027, 1, 18, tzinfo=UTC), datetime(2027, 1, 20, tzinfo=UTC),
                                                datetime(2027, 1, 25, tzinfo=UTC)]


def test_a_star_in_one_day_field_means_both_must_match() -> None:
    assert following("0 0 * * MON", T0) == [datetime(2027, 1, 18, tzinfo=UTC)]
    # A stepped star restricts its field (as robfig/cron): the 17th is an odd day, so it fires though a Sunday.
    assert following("0 0 */2 * MON", T0) == [datetime(2027, 1, 17, tzinfo=UTC)]


def test_a_time_zone_schedules_on_its_wall_clock() -> None:
    tokyo = ZoneInfo("Asia/Tokyo")
    [moment] = following("0 9 * * *", T0.astimezone(tokyo))
    assert moment.astimezone(UTC) == datetime(2027, 1, 16, 0, 0, tzinfo=UTC)


def test_an_impossible_date_never_fires() -> None:
    assert parse_schedule("0 0 30 2 *").next_after(T0) is None


@pytest.mark.parametrize(("schedule", "reason"), [
    ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
    ("60 * * * *", "end of range (60) above maximum (59): 60"),
    ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
    ("* * * * 7", "end of range (7) above maximum (6): 7"),
    ("5-2 * * * *", "beginning of range (5) beyond end of range (2): 5-2"),
    ("@every-day", "unrecognized descriptor: @every-day"),
    ("x * * * *", 'failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax'),
])
def test_invalid_schedules(schedule: str, reason: str) -> None:
    with pytest.raises(ScheduleError, match=f"^{re.escape(reason)}$"):
        parse_schedule(schedule)


def test_check_reports_the_schedule_zone_and_name() -> None:
    cronjob = make_cronjob("bad", name="x" * 53, timeZone="Mars/Olympus")
    assert [str(error) for error in cronjob_kind.check(cronjob, None)] == [
        f'metadata.name: Invalid value: "{"x" * 53}": must be no more than 52 characters',
        'spec.schedule: Invalid value: "bad": expected exactly 5 fields, found 1: [bad]',
        'spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus',
    ]


# --- missed runs ------------------------------------------------------------------------------------


def test_most_recent_of_several_missed_times() -> None:
    schedule = parse_schedule("*/10 * * * *")
    latest, count = most_recent_time(schedule, T0, T0 + timedelta(minutes=35))
    assert (latest, count) == (T0 + timedelta(minutes=30), 3)


def test_no_time_has_come_yet() -> None:
    assert most_recent_time(parse_schedule("0 * * * *"), T0, T0 + timedelta(minutes=59)) == (None, 0)


def test_more_than_a_hundred_missed_times_still_find_the_latest() -> None:
    latest, count = most_recent_time(parse_schedule("* * * * *"), T0, T0 + timedelta(days=3, seconds=30))
    assert count > 100
    assert latest == T0 + timedelta(days=3)


def make_cronjob(schedule: str = "*/1 * * * *", name: str = "hello", created: datetime = T0, **spec: Any) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": name, "namespace": "ns", "uid": "cj-uid", "creationTimestamp": stamp(created)},
            "spec": {"schedule": schedule, "jobTemplate": {"metadata": {"labels": {"app": "hello"}}, "spec": {
                "template": {"spec": {"restartPolicy": "OnFailure",
                                      "containers": [{"name": "c", "image": "busybox"}]}}}}, **spec}}


def make_job(name: str, started: datetime, condition: str | None = None) -> Obj:
    status: Obj = {"startTime": stamp(started)}
    if condition:
        status["conditions"] = [{"type": condition, "status": "True", "lastTransitionTime": stamp(started)}]
        if condition == "Complete":
            status["completionTime"] = stamp(started + timedelta(seconds=5))
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": stamp(started)},
            "status": status}


def test_the_first_time_after_creation_makes_a_job_and_requeues_for_the_next() -> None:
    result = plan(make_cronjob(), [], T0 + timedelta(minutes=1, seconds=2), UTC)
    assert result.create == T0 + timedelta(minutes=1)
    assert result.status["lastScheduleTime"] == stamp(T0 + timedelta(minutes=1))
    assert result.requeue_after == pytest.approx(58.1)


def test_before_the_first_time_nothing_is_made() -> None:
    result = plan(make_cronjob("0 * * * *"), [], T0 + timedelta(minutes=20), UTC)
    assert result.create is None
    assert result.requeue_after == pytest.approx(40 * 60 + 0.1)


def test_after_an_outage_only_the_most_recent_missed_time_runs() -> None:
    cronjob = make_cronjob("*/5 * * * *")
    cronjob["status"] = {"lastScheduleTime": stamp(T0)}
    result = plan(cronjob, [], T0 + timedelta(minutes=23), UTC)
    assert result.create == T0 + timedelta(minutes=20)
    assert not result.events


def test_a_missed_time_older_than_the_starting_deadline_does_not_run() -> None:
    cronjob = make_cronjob("*/5 * * * *", startingDeadlineSeconds=60)
    cronjob["status"] = {"lastScheduleTime": stamp(T0)}
    assert plan(cronjob, [], T0 + timedelta(minutes=23), UTC).create is None
    assert plan(cronjob, [], T0 + timedelta(minutes=20, seconds=30), UTC).create == T0 + timedelta(minutes=20)


def test_over_a_hundred_missed_times_warn() -> None:
    cronjob = make_cronjob("* * * * *")
    cronjob["status"] = {"lastScheduleTime": stamp(T0)}
    result = plan(cronjob, [], T0 + timedelta(hours=3), UTC)
    assert [event[1] for event in result.events] == ["TooManyMissedTimes"]
    assert result.create == T0 + timedelta(hours=3)


def test_forbid_skips_while_a_job_runs_and_replace_deletes_it() -> None:
    running = make_job("hello-1", T0)
    now = T0 + timedelta(minutes=1)
    forbid = plan(make_cronjob(concurrencyPolicy="Forbid"), [running], now, UTC)
    assert forbid.create is None and [event[1] for event in forbid.events] == ["JobAlreadyActive"]
    assert [ref["name"] for ref in forbid.status["active"]] == ["hello-1"]
    replace = plan(make_cronjob(concurrencyPolicy="Replace"), [running], now, UTC)
    assert replace.create == now and [job["metadata"]["name"] for job in replace.delete] == ["hello-1"]
    allow = plan(make_cronjob(), [running], now, UTC)
    assert allow.create == now and allow.delete == []


def test_a_suspended_cronjob_makes_no_job() -> None:
    assert plan(make_cronjob(suspend=True), [], T0 + timedelta(minutes=5), UTC).create is None


def test_history_keeps_the_newest_finished_jobs_within_the_limits() -> None:
    done = [make_job(f"ok-{n}", T0 + timedelta(minutes=n), "Complete") for n in range(5)]
    failed = [make_job(f"bad-{n}", T0 + timedelta(minutes=n), "Failed") for n in range(3)]
    result = plan(make_cronjob(suspend=True), [*done, *failed], T0 + timedelta(minutes=10), UTC)
    assert sorted(job["metadata"]["name"] for job in result.delete) == ["bad-0", "bad-1", "ok-0", "ok-1"]
    assert result.status["lastSuccessfulTime"] == stamp(T0 + timedelta(minutes=4, seconds=5))
    assert result.status["active"] == []


def test_the_job_is_named_after_its_minute_and_annotated_with_its_time() -> None:
    scheduled = T0 + timedelta(minutes=1)
    job = job_for(make_cronjob(), scheduled)
    assert job["metadata"]["name"] == job_name("hello", scheduled) == f"hello-{int(scheduled.timestamp()) // 60}"
    assert job["metadata"]["annotations"][SCHEDULED_TIMESTAMP_ANNOTATION] == "2027-01-15T08:01:00Z"
    assert job["metadata"]["labels"] == {"app": "hello"}
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_the_time_of_an_existing_job_is_not_made_again() -> None:
    now = T0 + timedelta(minutes=1)
    existing = make_job(job_name("hello", now), now)
    result = plan(make_cronjob(), [existing], now, UTC)
    assert result.create is None
    # The cache may not show the status write that recorded it yet: the time is recorded again, not lost.
    assert result.status["lastScheduleTime"] == stamp(now)


def test_columns() -> None:
    cronjob = make_cronjob(timeZone="Europe/Paris")
    cronjob["status"] = {"active": [{"name": "a"}], "lastScheduleTime": stamp(T0)}
    cells = [column.cell(cronjob, T0 + timedelta(seconds=30)) for column in cronjob_kind.COLUMNS[:6]]
    assert cells == ["*/1 * * * *", "Europe/Paris", "False", 1, "30s", "30s"]
    assert [column.name for column in cronjob_kind.COLUMNS if not column.priority] == [
        "Schedule", "Timezone", "Suspend", "Active", "Last Schedule", "Age"]
