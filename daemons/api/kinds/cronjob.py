"""batch/v1 CronJob: a Job made from a template at each time a cron schedule names, in an optional time zone.

The schedule language is upstream's (robfig/cron's standard parser): five fields (minute, hour, day of month,
month, day of week) with ``*``, ``?``, lists, ranges, steps and month/weekday names, or one of the ``@yearly``
family. As in cron, when both day fields are restricted a day matching either one fires.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from daemons.api import models, tables
from daemons.api.bundle import Column, FieldError, Obj, Resource
from daemons.api.defaults import default_cron_job
from daemons.api.kinds.job import JobTemplateSpec, check_job_spec
from daemons.api.times import human_duration, parse_time

# A CronJob's Jobs are named <cronjob>-<minutes since the epoch>: 11 characters after a name of at most 52.
MAX_NAME_LENGTH = 52
DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
               "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
MONTHS = {name: number for number, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}
WEEKDAYS = {name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# The search for the next time gives up after this many years (a schedule such as "0 0 30 2 *" never fires).
SEARCH_YEARS = 5


class ScheduleError(ValueError):
    """A schedule upstream's parser would reject; the message is its reason."""


@dataclass(frozen=True)
class FieldRange:
    low: int
    high: int
    names: dict[str, int]


FIELDS = (FieldRange(0, 59, {}), FieldRange(0, 23, {}), FieldRange(1, 31, {}), FieldRange(1, 12, MONTHS),
          FieldRange(0, 6, WEEKDAYS))


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule: the allowed values of each field, and whether each day field was ``*``/``?``."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool
    any_weekday: bool

    def day_matches(self, moment: datetime) -> bool:
        in_month = moment.day in self.days
        in_week = (moment.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week

    def next_after(self, moment: datetime) -> datetime | None:
        """The first scheduled time strictly after ``moment`` (aware, in the schedule's zone), or None within
        SEARCH_YEARS; computed on wall-clock time, as cron does."""
        zone = moment.tzinfo
        wall = moment.replace(tzinfo=None, second=0, microsecond=0) + timedelta(minutes=1)
        limit = wall.year + SEARCH_YEARS
        while wall.year <= limit:
            if wall.month not in self.months:
                wall = (wall.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
            elif not self.day_matches(wall):
                wall = wall.replace(hour=0, minute=0) + timedelta(days=1)
            elif wall.hour not in self.hours:
                wall = wall.replace(minute=0) + timedelta(hours=1)
            elif wall.minute not in self.minutes:
                wall += timedelta(minutes=1)
            else:
                return wall.replace(tzinfo=zone)
        return None


def _value(text: str, spec: FieldRange) -> int:
    number = spec.names.get(text.lower())
    if number is None:
        try:
            number = int(text)
        except ValueError:
            raise ScheduleError(f'failed to parse int from {text}: strconv.Atoi: parsing "{text}": invalid syntax') \
                from None
    return number


def _parse_field(text: str, spec: FieldRange) -> tuple[frozenset[int], bool]:
    values: set[int] = set()
    star = False
    for part in text.split(","):
        range_text, _, step_text = part.partition("/")
        step = _value(step_text, FieldRange(0, 0, {})) if step_text else 1
        if range_text in ("*", "?"):
            low, high = spec.low, spec.high
            star = star or not step_text or step == 1
        else:
            low_text, dash, high_text = range_text.partition("-")
            low = _value(low_text, spec)
            high = _value(high_text, spec) if dash else (spec.high if step_text else low)
        if low < spec.low:
            raise ScheduleError(f"beginning of range ({low}) below minimum ({spec.low}): {part}")
        if high > spec.high:
            raise ScheduleError(f"end of range ({high}) above maximum ({spec.high}): {part}")
        if low > high:
            raise ScheduleError(f"beginning of range ({low}) beyond end of range ({high}): {part}")
        if step <= 0:
            raise ScheduleError(f"step of range should be a positive number: {part}")
        values.update(range(low, high + 1, step))
    return frozenset(values), star


def parse_schedule(text: str) -> Schedule:
    """A schedule from its text; ScheduleError with upstream's reason when it is not one."""
    text = text.strip()
    if text.startswith("@"):
        if text not in DESCRIPTORS:
            raise ScheduleError(f"unrecognized descriptor: {text}")
        text = DESCRIPTORS[text]
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    parsed = [_parse_field(part, spec) for part, spec in zip(fields, FIELDS, strict=True)]
    return Schedule(parsed[0][0], parsed[1][0], parsed[2][0], parsed[3][0], parsed[4][0], parsed[2][1], parsed[4][1])


def zone_of(name: str | None) -> ZoneInfo | None:
    """The IANA zone ``name`` (None: the controller manager's local time, upstream's default); ValueError if unknown."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name}") from None


# --- the kind ---------------------------------------------------------------------------------------


class CronJobSpec(models.KubeModel):
    schedule: str
    time_zone: str | None = None
    starting_deadline_seconds: Annotated[int, Field(ge=0)] | None = None
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = "Allow"
    suspend: bool = False
    successful_jobs_history_limit: Annotated[int, Field(ge=0)] = 3
    failed_jobs_history_limit: Annotated[int, Field(ge=0)] = 1
    job_template: JobTemplateSpec


class CronJobStatus(models.KubeModel):
    active: list[models.ObjectReference] | None = None
    last_schedule_time: str | None = None
    last_successful_time: str | None = None


class CronJob(models.KubeObject):
    spec: CronJobSpec
    status: CronJobStatus | None = None


def check(cronjob: Obj, _current: Obj | None) -> list[FieldError]:
    """Upstream's ValidateCronJob beyond the model: the name's length, the schedule, the zone, the template."""
    errors: list[FieldError] = []
    name = (cronjob.get("metadata") or {}).get("name") or ""
    if len(name) > MAX_NAME_LENGTH:
        errors.append(FieldError.invalid("metadata.name", name, f"must be no more than {MAX_NAME_LENGTH} characters"))
    spec = cronjob.get("spec") or {}
    schedule = spec.get("schedule") or ""
    if "TZ=" in schedule:
        errors.append(FieldError.invalid("spec.schedule", schedule,
                                         "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"))
    else:
        try:
            parse_schedule(schedule)
        except ScheduleError as error:
            errors.append(FieldError.invalid("spec.schedule", schedule, str(error)))
    try:
        zone_of(spec.get("timeZone"))
    except ValueError as error:
        errors.append(FieldError.invalid("spec.timeZone", spec.get("timeZone"), str(error)))
    errors += check_job_spec((spec.get("jobTemplate") or {}).get("spec") or {}, "spec.jobTemplate.spec")
    return errors


def _last_schedule(cronjob: Obj, now: datetime) -> str:
    moment = parse_time((cronjob.get("status") or {}).get("lastScheduleTime"))
    return human_duration((now - moment).total_seconds()) if moment else tables.NONE


def _job_template(cronjob: Obj) -> Obj:
    return (cronjob.get("spec") or {}).get("jobTemplate") or {}


COLUMNS = (
    Column("Schedule", "string", lambda o, _n: (o.get("spec") or {}).get("schedule") or ""),
    Column("Timezone", "string", lambda o, _n: (o.get("spec") or {}).get("timeZone") or tables.NONE),
    Column("Suspend", "boolean", lambda o, _n: "True" if (o.get("spec") or {}).get("suspend") else "False"),
    Column("Active", "integer", lambda o, _n: len((o.get("status") or {}).get("active") or [])),
    Column("Last Schedule", "string", _last_schedule),
    tables.AGE,
    Column("Containers", "string", lambda o, _n: tables.template_containers(_job_template(o))[0], priority=1),
    Column("Images", "string", lambda o, _n: tables.template_containers(_job_template(o))[1], priority=1),
    Column("Selector", "string", lambda o, _n: tables.selector_text(_job_template(o)), priority=1),
)

RESOURCE = Resource("CronJob", "cronjobs", CronJob, group="batch", short_names=("cj",), subresources=("status",),
                    categories=("all",), defaults=default_cron_job, check=check, columns=COLUMNS)
