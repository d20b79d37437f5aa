"""Informer caches: events judged by resourceVersion, relists reconciled, both feeds without a broker."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from daemons.api.resources import resolve
from daemons.apiserver.publisher import routing_key
from daemons.machinery.informer import Delta, Informer, Store, decide_event, diff_relist

pytestmark = pytest.mark.unit

PODS = resolve("pods")
NODES = resolve("nodes")


def pod(name: str, rv: int, namespace: str = "default", labels: dict[str, str] | None = None,
        node: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": str(rv)}
    if labels:
        metadata["labels"] = labels
    return {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": {"nodeName": node} if node else {}}


def node(name: str, rv: int) -> dict[str, Any]:
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "resourceVersion": str(rv)}}


# --- decide_event -----------------------------------------------------------------------------------

def test_new_object_is_added_and_newer_version_updates() -> None:
    assert decide_event("ADDED", pod("a", 5), None) == Delta("add", "default/a", pod("a", 5))
    assert decide_event("MODIFIED", pod("a", 6), pod("a", 5)) == Delta("update", "default/a", pod("a", 6), pod("a", 5))


def test_modified_for_an_unknown_object_is_an_add() -> None:
    delta = decide_event("MODIFIED", pod("a", 7), None)
    assert delta is not None and delta.type == "add"


@pytest.mark.parametrize("event_type", ["ADDED", "MODIFIED", "DELETED"])
@pytest.mark.parametrize("rv", [4, 5])
def test_duplicate_and_stale_events_are_dropped(event_type: str, rv: int) -> None:
    assert decide_event(event_type, pod("a", rv), pod("a", 5)) is None


def test_revisions_compare_as_integers_not_strings() -> None:
    delta = decide_event("MODIFIED", pod("a", 10), pod("a", 9))
    assert delta is not None and delta.type == "update"
    assert decide_event("MODIFIED", pod("a", 9), pod("a", 10)) is None


def test_deleted_removes_with_the_final_state() -> None:
    final = pod("a", 8)
    assert decide_event("DELETED", final, pod("a", 6)) == Delta("delete", "default/a", final, pod("a", 6))


def test_late_events_do_not_resurrect_a_deleted_object() -> None:
    store = Store()
    for event_type, obj in [("ADDED", pod("a", 5)), ("DELETED", pod("a", 7)),
                            ("MODIFIED", pod("a", 6)), ("ADDED", pod("a", 5))]:
        delta = store.decide(event_type, obj)
        if delta:
            store.apply(delta)
    assert store.get("default", "a") is None


def test_deletion_seen_before_creation_keeps_the_object_gone() -> None:
    store = Store()
    deleted = store.decide("DELETED", pod("a", 7))
    assert deleted == Delta("delete", "default/a", pod("a", 7), None), "recorded, though nothing to remove"
    store.apply(deleted)
    assert store.decide("ADDED", pod("a", 5)) is None
    assert store.decide("ADDED", pod("a", 9)) == Delta("add", "default/a", pod("a", 9)), "a re-creation is newer"


def test_events_at_or_below_the_last_list_are_dropped() -> None:
    assert decide_event("ADDED", pod("a", 10), None, floor_rv=10) is None
    assert decide_event("DELETED", pod("a", 3), None, floor_rv=10) is None
    assert decide_event("ADDED", pod("a", 11), None, floor_rv=10) is not None


def test_object_that_stops_matching_leaves_like_a_delete() -> None:
    delta = decide_event("MODIFIED", pod("a", 6), pod("a", 5), matches=False)
    assert delta == Delta("delete", "default/a", pod("a", 6), pod("a", 5))
    assert decide_event("MODIFIED", pod("a", 6), None, matches=False) == Delta("delete", "default/a", pod("a", 6))


def test_unknown_event_type_is_rejected() -> None:
    with pytest.raises(ValueError):
        decide_event("BOOKMARK", pod("a", 1), None)


# --- diff_relist ------------------------------------------------------------------------------------

def test_relist_adds_deletes_and_updates_every_remaining_object() -> None:
    cached = {"default/a": pod("a", 5), "default/b": pod("b", 6), "default/gone": pod("gone", 4)}
    items = [pod("a", 5), pod("b", 9), pod("new", 8)]
    deltas = {delta.key: delta for delta in diff_relist(cached, {}, items, list_rv=10)}
    assert deltas["default/a"] == Delta("update", "default/a", pod("a", 5), pod("a", 5))
    assert deltas["default/b"] == Delta("update", "default/b", pod("b", 9), pod("b", 6))
    assert deltas["default/new"] == Delta("add", "default/new", pod("new", 8))
    assert deltas["default/gone"] == Delta("delete", "default/gone", pod("gone", 4), pod("gone", 4))
    assert len(deltas) == 4


def test_relist_keeps_entries_newer_than_the_list() -> None:
    cached = {"default/a": pod("a", 12), "default/created-meanwhile": pod("created-meanwhile", 11)}
    deltas = {delta.key: delta for delta in diff_relist(cached, {}, [pod("a", 5)], list_rv=10)}
    assert deltas["default/a"].obj == pod("a", 12)
    assert deltas["default/created-meanwhile"].type == "update"
    assert deltas["default/created-meanwhile"].obj == pod("created-meanwhile", 11)


def test_relist_does_not_re_add_an_object_deleted_after_the_list() -> None:
    assert diff_relist({}, {"default/a": 11}, [pod("a", 5)], list_rv=10) == []


def test_store_replace_moves_the_floor_and_prunes_old_tombstones() -> None:
    store = Store()
    store.apply(Delta("delete", "default/old", pod("old", 3)))
    store.apply(Delta("delete", "default/recent", pod("recent", 12)))
    store.replace([pod("a", 4)], list_rv=10)
    assert store.resource_version == 10
    assert store.keys() == ["default/a"]
    assert store.decide("ADDED", pod("recent", 11)) is None, "tombstones newer than the list survive"
    assert store.decide("ADDED", pod("old", 9)) is None, "and the floor covers the pruned ones"


def test_store_reads() -> None:
    store = Store()
    store.replace([pod("a", 1), pod("b", 2, namespace="kube-system"), node("n1", 3)], list_rv=3)
    assert store.get("default", "a") == pod("a", 1)
    assert store.get(None, "n1") == node("n1", 3)
    assert store.get_by_key("kube-system/b") == pod("b", 2, namespace="kube-system")
    assert [obj["metadata"]["name"] for obj in store.list("kube-system")] == ["b"]
    assert len(store.list()) == 3
    assert "default/a" in store
    assert len(store) == 3


# --- the informer, fed without a broker ---------------------------------------------------------------

class FakeClient:
    """Answers LIST from a dict of objects and WATCH from scripted event lists."""

    def __init__(self, objects: list[dict[str, Any]], list_rv: int) -> None:
        self.objects = objects
        self.list_rv = list_rv
        self.lists: list[dict[str, Any]] = []
        self.watches: list[dict[str, Any]] = []
        self.scripts: list[list[dict[str, Any]]] = []
        self.idle = threading.Event()

    def list(self, resource: Any, **kwargs: Any) -> dict[str, Any]:
        self.lists.append(kwargs)
        return {"kind": "PodList", "metadata": {"resourceVersion": str(self.list_rv)},
                "items": [json.loads(json.dumps(obj)) for obj in self.objects]}

    def watch(self, resource: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.watches.append(kwargs)
        if self.scripts:
            yield from self.scripts.pop(0)
        else:
            self.idle.wait(5)


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def on_add(self, obj: dict[str, Any]) -> None:
        self.calls.append(("add", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.calls.append(("update", new["metadata"]["name"], new["metadata"]["resourceVersion"]))

    def on_delete(self, obj: dict[str, Any]) -> None:
        self.calls.append(("delete", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))


def informer_for(client: FakeClient, recorder: Recorder, **kwargs: Any) -> Informer:
    return Informer(client, PODS, on_add=recorder.on_add, on_update=recorder.on_update,  # type: ignore[arg-type]
                    on_delete=recorder.on_delete, **kwargs)


def test_relist_fills_the_cache_and_lists_all_namespaces() -> None:
    client = FakeClient([pod("a", 3), {"metadata": {"name": "b", "namespace": "x", "resourceVersion": "4"}}], 7)
    recorder = Recorder()
    informer = informer_for(client, recorder)
    informer.relist()
    assert client.lists[0]["all_namespaces"] is True
    assert recorder.calls == [("add", "a", "3"), ("add", "b", "4")]
    assert informer.store.get("x", "b")["kind"] == "Pod", "LIST items get their kind filled in"
    assert informer.store.resource_version == 7


class FailingOnceClient(FakeClient):
    """A LIST that fails the first time it is asked after ``fail_next`` is set, as an absent apiserver's would."""

    fail_next = False

    def list(self, resource: Any, **kwargs: Any) -> dict[str, Any]:
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("apiserver away")
        return super().list(resource, **kwargs)


def test_a_list_after_a_failed_one_marks_the_cache_recovered() -> None:
    client = FailingOnceClient([pod("a", 3)], 7)
    informer = informer_for(client, Recorder())
    informer.relist()
    assert informer.listed_at is not None
    assert informer.recovered_at is None, "a first LIST recovers from nothing"
    client.fail_next = True
    with pytest.raises(ConnectionError):
        informer.relist()
    informer.relist()
    assert informer.recovered_at == informer.listed_at
    first_recovery = informer.recovered_at
    informer.relist()
    assert informer.recovered_at == first_recovery, "a LIST after a good one is no recovery"


def test_handle_message_applies_bus_events_and_drops_duplicates() -> None:
    client = FakeClient([pod("a", 3)], 5)
    recorder = Recorder()
    informer = informer_for(client, recorder, amqp_url="amqp://localhost", queue_name="test.pods")
    informer.relist()
    body = json.dumps({"type": "MODIFIED", "object": pod("a", 6)}).encode()
    assert informer.handle_message("pods.default.a", body) is not None
    assert informer.handle_message("pods.default.a", body) is None
    informer.handle_message("pods.default.a", json.dumps({"type": "DELETED", "object": pod("a", 8)}).encode())
    informer.handle_message("pods.default.a", b"not json")
    informer.handle_message("services.default.a", json.dumps({"type": "ADDED", "object": pod("z", 9)}).encode())
    assert recorder.calls == [("add", "a", "3"), ("update", "a", "6"), ("delete", "a", "8")]
    assert informer.store.list() == []


def test_selectors_filter_bus_events_client_side() -> None:
    recorder = Recorder()
    informer = informer_for(FakeClient([], 1), recorder, namespace="default", label_selector="app=web",
                            field_selector="spec.nodeName=n1", amqp_url="amqp://x", queue_name="q")
    assert informer.binding_key == "pods.default.#"
    informer.handle_event({"type": "ADDED", "object": pod("web", 2, labels={"app": "web"}, node="n1")})
    informer.handle_event({"type": "ADDED", "object": pod("db", 3, labels={"app": "db"}, node="n1")})
    informer.handle_event({"type": "ADDED", "object": pod("other", 4, labels={"app": "web"}, node="n2")})
    informer.handle_event({"type": "ADDED", "object": pod("web", 5, "kube-system", {"app": "web"}, "n1")})
    informer.handle_event({"type": "MODIFIED", "object": pod("web", 6, labels={"app": "old"}, node="n1")})
    assert recorder.calls == [("add", "web", "2"), ("delete", "web", "6")]


def test_cluster_scoped_informer_binds_every_namespace() -> None:
    informer = Informer(FakeClient([], 1), NODES, namespace="ignored")  # type: ignore[arg-type]
    assert informer.binding_key == "nodes.#"
    informer.handle_event({"type": "ADDED", "object": node("n1.example.com", 2)})
    assert informer.store.get(None, "n1.example.com") is not None


def test_grouped_kind_binds_and_accepts_only_its_own_topic() -> None:
    informer = Informer(FakeClient([], 1), resolve("replicasets.apps"), namespace="default")  # type: ignore[arg-type]
    assert informer.binding_key == "replicasets:apps.default.#"
    assert informer.handle_message("replicasets.default.a", b"{}") is None


def test_a_kind_of_a_dotted_group_hears_what_the_publisher_routes_for_it() -> None:
    """RabbitMQ splits keys at dots: a group's dots must not split the topic the informer checks."""
    informer = Informer(FakeClient([], 1), resolve("leases"))  # type: ignore[arg-type]
    key = routing_key("/registry/leases.coordination.k8s.io/kube-node-lease/n1")
    assert key == "leases:coordination:k8s:io.kube-node-lease.n1"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "n1", "namespace": "kube-node-lease", "resourceVersion": "2"}, "spec": {}}
    assert informer.handle_message(key, json.dumps({"type": "ADDED", "object": lease}).encode()) is not None
    assert informer.store.get("kube-node-lease", "n1") is not None


def test_added_handler_hears_about_cached_objects_first() -> None:
    client = FakeClient([pod("a", 1), pod("b", 2)], 2)
    informer = Informer(client, PODS)  # type: ignore[arg-type]
    informer.relist()
    recorder = Recorder()
    informer.add_handlers(on_add=recorder.on_add)
    assert sorted(recorder.calls) == [("add", "a", "1"), ("add", "b", "2")]


def test_a_failing_handler_does_not_stop_the_others() -> None:
    recorder = Recorder()

    def broken(obj: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    informer = Informer(FakeClient([], 1), PODS, on_add=broken)  # type: ignore[arg-type]
    informer.add_handlers(on_add=recorder.on_add)
    informer.handle_event({"type": "ADDED", "object": pod("a", 2)})
    assert recorder.calls == [("add", "a", "2")]


def test_amqp_informer_needs_a_queue_name() -> None:
    with pytest.raises(ValueError):
        Informer(FakeClient([], 1), PODS, amqp_url="amqp://x")  # type: ignore[arg-type]


def test_watch_feed_resumes_from_the_list_and_relists_on_gone() -> None:
    client = FakeClient([pod("a", 3)], 5)
    client.scripts = [
        [{"type": "MODIFIED", "object": pod("a", 6)},
         {"type": "ADDED", "object": pod("b", 7)},
         {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}],
        [{"type": "DELETED", "object": pod("b", 12)}],
    ]
    recorder = Recorder()
    informer = informer_for(client, recorder, resync_seconds=0)
    client_after_gone = [pod("a", 6), pod("b", 7), pod("c", 9)]

    def on_gone_relist(resource: Any, **kwargs: Any) -> dict[str, Any]:
        client.lists.append(kwargs)
        if len(client.lists) == 1:
            return {"metadata": {"resourceVersion": "5"}, "items": [pod("a", 3)]}
        return {"metadata": {"resourceVersion": "10"}, "items": client_after_gone}

    client.list = on_gone_relist  # type: ignore[method-assign]
    informer.start()
    try:
        assert informer.wait_synced(5)
        assert wait_for(lambda: ("delete", "b", "12") in recorder.calls)
    finally:
        client.idle.set()
        informer.stop()
    assert [watch["resource_version"] for watch in client.watches[:2]] == ["5", "10"]
    assert len(client.lists) == 2
    assert recorder.calls[:4] == [("add", "a", "3"), ("update", "a", "6"), ("add", "b", "7"), ("update", "a", "6")]
    assert ("add", "c", "9") in recorder.calls
    assert sorted(informer.store.keys()) == ["default/a", "default/c"]
