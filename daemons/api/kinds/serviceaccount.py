"""v1 ServiceAccount: the identity a pod runs as; every namespace has one named ``default``."""

from __future__ import annotations

from daemons.api import tables
from daemons.api.bundle import Column, Resource
from daemons.api.models import KubeModel, KubeObject, ObjectReference

DEFAULT_NAME = "default"


class LocalObjectReference(KubeModel):
    name: str | None = None


class ServiceAccount(KubeObject):
    secrets: list[ObjectReference] | None = None
    image_pull_secrets: list[LocalObjectReference] | None = None
    automount_service_account_token: bool | None = None


RESOURCE = Resource(
    "ServiceAccount", "serviceaccounts", ServiceAccount, short_names=("sa",), has_status=False,
    columns=(Column("Secrets", "string", lambda obj, _now: len(obj.get("secrets") or [])),
             tables.AGE),
)
