"""The kubelet's HTTPS API contract (routes, tokens, errors) and how docker inspect is read."""

from datetime import UTC, datetime

import pytest

from daemons.kubelet.runtime import docker_state, image_reference, observe, parse_docker_time
from daemons.kubelet.server import Route, authorized, load_tokens, parse_route, status_body


@pytest.mark.parametrize(("method", "path", "route"), [
    ("GET", "/healthz", Route("healthz")),
    ("GET", "/containerLogs/ns/web/server?follow=true&tailLines=5", Route("logs", "ns", "web", "server")),
    ("POST", "/run/ns/web/sidecar", Route("run", "ns", "web", "sidecar")),
    ("GET", "/run/ns/web/sidecar", None),
    ("POST", "/containerLogs/ns/web/server", None),
    ("GET", "/containerLogs/ns/web", None),
    ("GET", "/pods", None),
])
def test_routes(method, path, route):
    assert parse_route(method, path) == route


def test_tokens_one_per_line_or_in_token_file_format(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("# comment\nplain-token\n\ncsv-token,system:node:n1,uid,\"system:nodes\"\n")
    tokens = load_tokens(path)
    assert tokens == {"plain-token", "csv-token"}
    assert load_tokens(None) == frozenset()
    assert authorized("Bearer plain-token", tokens) and authorized("bearer csv-token", tokens)
    assert not authorized("Bearer other", tokens)
    assert not authorized("Basic plain-token", tokens)
    assert not authorized(None, tokens)
    assert not authorized("Bearer ", frozenset({""}))


def test_errors_are_status_objects():
    assert status_body(404, "NotFound", "no pod") == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "no pod",
        "reason": "NotFound", "code": 404}


INSPECT = {
    "Id": "f" * 64,
    "Created": "2026-01-01T11:59:58.123456789Z",
    "Image": "sha256:abc",
    "State": {"Status": "exited", "ExitCode": 137, "OOMKilled": True, "Error": "",
              "StartedAt": "2026-01-01T11:59:59.5Z", "FinishedAt": "2026-01-01T12:00:01.999999999Z"},
    "Config": {"Image": "busybox:latest", "Labels": {
        "io.minik8s.pod.uid": "u1", "io.minik8s.pod.namespace": "ns", "io.minik8s.pod.name": "web",
        "io.minik8s.container.name": "main", "io.minik8s.container.kind": "app", "io.minik8s.node": "n1",
        "io.minik8s.restart-count": "4", "io.minik8s.backoff": "2", "io.minik8s.container.hash": "h"}},
    "NetworkSettings": {"IPAddress": ""},
}


def test_observe_reads_state_labels_and_times():
    container = observe(INSPECT)
    assert (container.name, container.kind, container.state) == ("main", "app", "exited")
    assert (container.pod_uid, container.pod_namespace, container.pod_name) == ("u1", "ns", "web")
    assert (container.restart_count, container.backoff, container.spec_hash) == (4, 2, "h")
    assert (container.exit_code, container.oom_killed, container.terminated_reason) == (137, True, "OOMKilled")
    assert container.started_at == datetime(2026, 1, 1, 11, 59, 59, 500000, tzinfo=UTC)
    assert container.finished_at == datetime(2026, 1, 1, 12, 0, 1, 999999, tzinfo=UTC)
    assert container.image_id == "sha256:abc"


def test_a_running_pause_container_gives_the_pod_ip():
    running = {**INSPECT, "State": {"Status": "running", "StartedAt": "2026-01-01T12:00:00Z",
                                    "FinishedAt": "0001-01-01T00:00:00Z"},
               "NetworkSettings": {"IPAddress": "172.17.0.3"}}
    container = observe(running)
    assert (container.state, container.exit_code, container.finished_at) == ("running", None, None)
    assert container.ip_address == "172.17.0.3"


def test_docker_states_fold_into_three():
    assert docker_state({"Status": "running"}) == "running"
    assert docker_state({"Status": "created"}) == "created"
    assert docker_state({"Status": "created", "Error": "exec: \"nope\": not found"}) == "exited"
    assert docker_state({"Status": "dead"}) == "exited"
    assert parse_docker_time("0001-01-01T00:00:00Z") is None and parse_docker_time(None) is None


def test_image_references_default_to_latest():
    assert image_reference("busybox") == ("busybox", "latest")
    assert image_reference("registry:5000/minik8s/python:3.11") == ("registry:5000/minik8s/python", "3.11")
    assert image_reference("busybox@sha256:" + "a" * 64) == ("busybox", "sha256:" + "a" * 64)
