"""``kubectl wait``: block until objects have a condition (``--for=condition=Complete``) or are gone
(``--for=delete``), reading a watch rather than polling."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from cli.session import CLIError, Session, object_ref, type_and_names
from daemons.api.errors import NotFound
from daemons.api.resources import Resource

DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")
DEFAULT_TIMEOUT = "30s"

Obj = dict[str, Any]
Check = Callable[[Obj | None], bool]


def parse_duration(text: str) -> float:
    """A Go duration as kubectl's ``--timeout`` takes it (``30s``, ``2m``, ``1h30m``, ``0``), in seconds."""
    match = DURATION.match(text.strip())
    if text.strip() == "0":
        return 0.0
    if not text.strip() or match is None:
        raise CLIError(f'invalid argument "{text}" for "--timeout" flag: time: invalid duration "{text}"')
    hours, minutes, seconds = match.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)


def condition_check(condition: str) -> Check:
    """``condition=Type`` or ``condition=Type=value`` (default True); the type compares without case, as upstream."""
    kind, _, value = condition.partition("=")
    wanted = value or "True"

    def met(obj: Obj | None) -> bool:
        return obj is not None and any(
            str(item.get("type", "")).lower() == kind.lower() and str(item.get("status", "")).lower() == wanted.lower()
            for item in (obj.get("status") or {}).get("conditions") or [])

    return met


def check_for(text: str) -> Check:
    """What ``--for`` asks for."""
    if text == "delete":
        return lambda obj: obj is None
    kind, _, rest = text.partition("=")
    if kind == "condition" and rest:
        return condition_check(rest)
    raise CLIError(f'unrecognized condition: "{text}"')


def _wait_one(session: Session, resource: Resource, name: str, met: Check, deadline: float,
              must_exist: bool) -> bool:
    """Whether ``name`` meets ``met`` before ``deadline``: read it, then follow its watch until then. With
    ``must_exist`` an object missing at the first read is an error, as upstream's condition waits."""
    namespace = session.namespace if resource.namespaced else None
    first = True
    while True:
        try:
            current: Obj | None = session.client.get(resource, name, namespace)
        except NotFound:
            if must_exist and first:
                raise
            current = None
        first = False
        if met(current):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        version = ((current or {}).get("metadata") or {}).get("resourceVersion")
        for event in session.client.watch(resource, namespace, resource_version=version,
                                          field_selector=f"metadata.name={name}",
                                          timeout_seconds=max(1, math.ceil(min(remaining, 3600)))):
            obj = None if event.get("type") == "DELETED" else event.get("object")
            if event.get("type") == "ERROR":
                break  # the version is too old: read again
            if met(obj):
                return True
            if time.monotonic() >= deadline:
                return False


def wait(
    ctx: typer.Context,
    targets: Annotated[list[str], typer.Argument(help="TYPE/NAME [TYPE/NAME...] or TYPE NAME...")],
    for_: Annotated[str, typer.Option("--for", help="The condition to wait on: condition=Type[=value] or "
                                                    "delete.")] = "",
    timeout: Annotated[str, typer.Option("--timeout", help="How long to wait before giving up (30s by "
                                                           "default; 0 checks once).")] = DEFAULT_TIMEOUT,
) -> None:
    """Wait for specific conditions on one or many resources."""
    session: Session = ctx.obj
    if not for_:
        raise CLIError("--for must be specified")
    met = check_for(for_)
    deadline = time.monotonic() + parse_duration(timeout)
    for resource, names in type_and_names(targets):
        if not names:
            raise CLIError("resource name must be specified")
        for name in names:
            if not _wait_one(session, resource, name, met, deadline, for_ != "delete"):
                raise CLIError(f"timed out waiting for the condition on {resource.plural}/{name}")
            print(f"{object_ref(resource, name)} condition met")
