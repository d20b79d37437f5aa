"""The ServiceAccount controller: which namespaces get a ``default`` account, against fake caches and API."""

from __future__ import annotations

import pytest

from daemons.api.errors import AlreadyExists, Forbidden
from daemons.controllers.context import ControllerContext
from daemons.controllers.controllers import CONTROLLERS
from daemons.controllers.informers import InformerFactory
from daemons.controllers.serviceaccount import ServiceAccountsController

pytestmark = pytest.mark.unit


class FakeApi:
    def __init__(self) -> None:
        self.created: list[tuple[str, str]] = []
        self.error: Exception | None = None

    def create(self, resource, body, namespace=None, params=None):
        if self.error is not None:
            raise self.error
        self.created.append((namespace, body["metadata"]["name"]))
        return body


def namespace(name: str, terminating: bool = False) -> dict:
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "resourceVersion": "1"},
           "status": {"phase": "Terminating" if terminating else "Active"}}
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def account(ns: str, name: str = "default", version: int = 2) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": str(version)}}


@pytest.fixture
def api():
    return FakeApi()


@pytest.fixture
def controller(api):
    return ServiceAccountsController(ControllerContext(api, InformerFactory(api), workers=1))


def feed(informer, event_type, obj):
    informer.handle_event({"type": event_type, "object": obj})


def drain(controller):
    while controller.controller.process_next(timeout=0):
        pass


def test_an_active_namespace_without_one_gets_a_default_account(api, controller):
    assert CONTROLLERS["serviceaccount"] is ServiceAccountsController
    feed(controller.namespaces, "ADDED", namespace("has"))
    feed(controller.accounts, "ADDED", account("has"))
    feed(controller.namespaces, "ADDED", namespace("lacks"))
    feed(controller.namespaces, "ADDED", namespace("going", terminating=True))
    drain(controller)
    assert api.created == [("lacks", "default")]


def test_a_deleted_default_account_is_made_again_and_another_is_not(api, controller):
    feed(controller.namespaces, "ADDED", namespace("ns"))
    feed(controller.accounts, "ADDED", account("ns"))
    feed(controller.accounts, "ADDED", account("ns", "robot"))
    drain(controller)
    feed(controller.accounts, "DELETED", account("ns", "robot", 3))
    assert len(controller.controller.queue) == 0
    feed(controller.accounts, "DELETED", account("ns", version=4))
    drain(controller)
    assert api.created == [("ns", "default")]


def test_a_create_racing_the_cache_or_the_namespace_deletion_is_no_error(api, controller):
    feed(controller.namespaces, "ADDED", namespace("ns"))
    api.error = AlreadyExists("exists")
    controller.sync("ns")
    api.error = Forbidden("terminating", details={"causes": [{"type": "NamespaceTerminating"}]})
    controller.sync("ns")
    assert api.created == []
