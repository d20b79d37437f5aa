"""A kind's bundle: everything the apiserver, the clients and the CLIs need to know about one kind, in one row.

Each kind lives in one module under ``daemons/api/kinds/`` that builds a ``Resource`` with its model and
hooks; ``daemons/api/kinds/__init__.py`` lists the rows. The apiserver's write path calls the hooks and names
no kind: adding a kind is writing its module and adding its row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from daemons.api import models

Obj = dict[str, Any]
NameFormat = Literal["subdomain", "label", "dns1035", "path"]
Cell = str | int
DeletionPropagation = Literal["Orphan", "Background", "Foreground"]


def _quoted(value: Any) -> str:
    """A value as upstream's field errors print it: strings quoted, the rest as Go prints them."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


@dataclass(frozen=True)
class FieldError:
    """One invalid field, as upstream's ``field.Error``: its ``reason`` becomes a StatusCause's ``reason``."""

    reason: str  # FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, ...
    field: str  # the wire path, e.g. ``spec.containers[0].image``
    message: str  # the whole message after the field, e.g. ``Invalid value: "x": must be ...``

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

    @classmethod
    def required(cls, field: str, detail: str = "") -> FieldError:
        return cls("FieldValueRequired", field, f"Required value: {detail}" if detail else "Required value")

    @classmethod
    def invalid(cls, field: str, value: Any, detail: str) -> FieldError:
        return cls("FieldValueInvalid", field, f"Invalid value: {_quoted(value)}: {detail}")

    @classmethod
    def not_supported(cls, field: str, value: Any, supported: list[str] | tuple[str, ...]) -> FieldError:
        values = ", ".join(_quoted(choice) for choice in supported)
        return cls("FieldValueNotSupported", field, f"Unsupported value: {_quoted(value)}: supported values: {values}")

    @classmethod
    def forbidden(cls, field: str, detail: str) -> FieldError:
        return cls("FieldValueForbidden", field, f"Forbidden: {detail}")

    @classmethod
    def duplicate(cls, field: str, value: Any) -> FieldError:
        return cls("FieldValueDuplicate", field, f"Duplicate value: {_quoted(value)}")

    @classmethod
    def too_long(cls, field: str, limit: int) -> FieldError:
        return cls("FieldValueTooLong", field, f"Too long: must have at most {limit} bytes")


@dataclass(frozen=True)
class Column:
    """One server-side ``Table`` column: upstream kubectl's name, type and priority, and how to fill a cell."""

    name: str
    type: str
    cell: Callable[[Obj, datetime], Cell]
    priority: int = 0
    format: str = ""
    description: str = ""


def _no_defaults(obj: Obj) -> None:
    return None


def _no_errors(obj: Obj, current: Obj | None) -> list[FieldError]:
    return []


def _no_status(obj: Obj) -> Obj | None:
    return None


def _no_grace(obj: Obj, requested: int | None) -> int | None:
    return None


def _no_hold(obj: Obj) -> bool:
    return False


@dataclass(frozen=True)
class Resource:
    """One served kind.

    Hooks (all pure, all given plain dicts in wire form):

    - ``defaults(obj)``: fill upstream's defaults in place (SetDefaults), before validation.
    - ``check(obj, current)``: field errors beyond what the model's types catch; ``current`` is the stored
      object on update and None on create.
    - ``check_update(obj, current)``: errors only an update can have (immutable fields).
    - ``initial_status(obj)``: the status a new object starts with (None: keep what was sent, or none).
    - ``creator_owns_status``: a create may set the status (Events, Leases, Endpoints).
    - ``columns``: the Table columns after NAME (and NAMESPACE), in upstream kubectl's order.
    - ``deletion_grace(obj, requested)``: seconds a DELETE leaves the object in place for its owner to
      finish (graceful pod deletion); None deletes at once.
    - ``deletion_hold(obj)``: whether DELETE only marks the object and a controller removes it later
      (a namespace is emptied by the namespace controller).
    - ``mark_deleted(obj)``: what else changes, in place, when DELETE marks an object it does not remove
      at once (a namespace's phase turns Terminating).
    - ``propagates_deletion``: whether DELETE's propagationPolicy applies: False for kinds the garbage
      collector does not watch, which could then never lose its finalizer.
    - ``default_propagation``: what a DELETE without a propagation policy does to dependents.
    - ``bus_topic``: the event bus routing key's first word, ``<plural>`` or ``<plural>:<group with : for .>``.
    """

    kind: str
    plural: str
    model: type[models.KubeObject]
    group: str = ""
    version: str = "v1"
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    name_format: NameFormat = "subdomain"
    # Whether the object has a spec/status split: plain writes then keep the stored status.
    has_status: bool = True
    defaults: Callable[[Obj], None] = _no_defaults
    check: Callable[[Obj, Obj | None], list[FieldError]] = _no_errors
    check_update: Callable[[Obj, Obj], list[FieldError]] = _no_errors
    initial_status: Callable[[Obj], Obj | None] = _no_status
    creator_owns_status: bool = False
    columns: tuple[Column, ...] = ()
    deletion_grace: Callable[[Obj, int | None], int | None] = _no_grace
    deletion_hold: Callable[[Obj], bool] = _no_hold
    mark_deleted: Callable[[Obj], None] = _no_defaults
    propagates_deletion: bool = True
    default_propagation: DeletionPropagation = "Background"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def qualified_name(self) -> str:
        """``plural.group`` as kubectl and etcd keys spell it (``pods``, ``replicasets.apps``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def bus_topic(self) -> str:
        """The event bus routing key's first word: ``pods``, ``replicasets:apps``, ``leases:coordination:k8s:io``.

        RabbitMQ splits routing keys into words at dots, so the group's dots become colons: the topic stays one
        word, and no two groups share one (a group name has no colon).
        """
        return f"{self.plural}:{self.group.replace('.', ':')}" if self.group else self.plural

    @property
    def api_prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path of the collection, one object, or one of its subresources."""
        parts = [self.api_prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)

    def storage_prefix(self, namespace: str | None = None) -> str:
        """The etcd key prefix: ``/registry/<resource>[.<group>]/[<namespace>/]``."""
        prefix = f"/registry/{self.qualified_name}/"
        if self.namespaced and namespace:
            prefix += f"{namespace}/"
        return prefix

    def storage_key(self, namespace: str | None, name: str) -> str:
        return self.storage_prefix(namespace if self.namespaced else None) + name
