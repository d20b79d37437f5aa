"""Who may do what, and the admission chains every create and update passes through.

The write path runs: authorize -> mutating chain -> the row's defaults -> model validation -> the row's
checks -> validating chain -> storage. A plugin is an object with ``async admit(attributes)``: mutating ones
may change ``attributes.obj`` in place, validating ones only raise.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from daemons.api import errors
from daemons.api.bundle import Resource
from daemons.api.resources import require
from daemons.apiserver.auth import User

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass
class Attributes:
    """One write as admission sees it: ``current`` is None on create, ``obj`` the object to store."""

    operation: str  # CREATE or UPDATE
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    obj: Obj
    current: Obj | None


class Plugin(Protocol):
    async def admit(self, attributes: Attributes) -> None: ...


class Authorizer(Protocol):
    async def authorize(self, user: User | None, verb: str, resource: Resource | None, namespace: str | None,
                        name: str | None, subresource: str | None) -> None:
        """Raise ``Forbidden`` unless ``user`` may ``verb`` the object."""


class AllowAuthenticated:
    """Every authenticated user may do everything (the authentication layer already refused the rest)."""

    async def authorize(self, user: User | None, verb: str, resource: Resource | None, namespace: str | None,
                        name: str | None, subresource: str | None) -> None:
        if user is None:
            raise errors.Forbidden(f"{verb.lower()} is forbidden: no user")


class NamespaceLifecycle:
    """New content needs its namespace to exist and not be Terminating, as upstream's plugin of this name."""

    def __init__(self, lookup: Callable[[Resource, str | None, str], Awaitable[Obj | None]]) -> None:
        self.lookup = lookup
        self.namespaces = require("v1", "Namespace")

    async def admit(self, attributes: Attributes) -> None:
        resource, namespace = attributes.resource, attributes.namespace
        if not resource.namespaced or attributes.operation != "CREATE":
            return
        if not namespace:
            raise errors.BadRequest("a namespace is required for namespaced resources")
        found = await self.lookup(self.namespaces, None, namespace)
        if found is None:
            raise errors.not_found("namespaces", namespace)
        if (found.get("status") or {}).get("phase") == "Terminating":
            message = f"unable to create new content in namespace {namespace} because it is being terminated"
            log.debug("refused %s %s/%s: %s", resource.kind, namespace, attributes.name, message)
            raise errors.Forbidden(
                f"{resource.plural} is forbidden: {message}",
                details={"kind": resource.plural, "causes": [
                    {"type": "NamespaceTerminating", "field": "metadata.namespace", "message": message}]})


@dataclass(frozen=True)
class Admission:
    """The two chains, run in order; the first plugin to raise stops the write."""

    mutating: Sequence[Plugin] = ()
    validating: Sequence[Plugin] = ()

    async def mutate(self, attributes: Attributes) -> None:
        for plugin in self.mutating:
            await plugin.admit(attributes)

    async def validate(self, attributes: Attributes) -> None:
        for plugin in self.validating:
            await plugin.admit(attributes)
