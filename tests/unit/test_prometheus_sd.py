"""The file_sd targets Prometheus reads: what they say for a set of nodes, and how they are written."""

import json
import os

import pytest

from daemons.controllers.context import ControllerContext
from daemons.controllers.prometheus_sd import (
    PrometheusSDController,
    file_sd_groups,
    target_files,
    target_view,
    write_if_changed,
)

pytestmark = pytest.mark.unit


def node(name: str, address: str | None, port: int | None = 10250, heartbeat: str = "t0") -> dict:
    status: dict = {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}
    if address:
        status["addresses"] = [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": address}]
    if port:
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": port}}
    return {"metadata": {"name": name}, "status": status}


def test_one_group_per_node_with_an_address_sorted_and_labelled():
    nodes = [node("worker-2", "10.0.0.12", 11250), node("worker-1", "10.0.0.11"), node("joining", None)]
    files = {name: json.loads(content) for name, content in target_files(nodes).items()}
    assert files["kubelets.json"] == [
        {"targets": ["10.0.0.11:10250"], "labels": {"node": "worker-1"}},
        {"targets": ["10.0.0.12:11250"], "labels": {"node": "worker-2"}},
    ]
    assert files["proxies.json"] == [
        {"targets": ["10.0.0.11:10249"], "labels": {"node": "worker-1"}},
        {"targets": ["10.0.0.12:10249"], "labels": {"node": "worker-2"}},
    ]


def test_defaults_and_ipv6():
    assert file_sd_groups([node("n1", "fd00::1", port=None)]) == [{"targets": ["[fd00::1]:10250"],
                                                                   "labels": {"node": "n1"}}]
    assert json.loads(target_files([])["kubelets.json"]) == []


def test_heartbeats_do_not_move_targets():
    assert target_view(node("n1", "10.0.0.1", heartbeat="t0")) == target_view(node("n1", "10.0.0.1", heartbeat="t1"))
    assert target_view(node("n1", "10.0.0.1")) != target_view(node("n1", "10.0.0.2"))


def test_files_written_readable_and_only_on_change(tmp_path):
    path = tmp_path / "sd" / "kubelets.json"
    assert write_if_changed(path, "[]\n")
    assert path.read_text() == "[]\n" and oct(path.stat().st_mode & 0o777) == "0o644"
    before = path.stat().st_ino
    assert not write_if_changed(path, "[]\n")
    assert path.stat().st_ino == before
    assert write_if_changed(path, "[1]\n")
    assert path.read_text() == "[1]\n"
    assert os.listdir(path.parent) == ["kubelets.json"]  # no temporary file left behind


class FakeInformer:
    def __init__(self, nodes: list[dict]) -> None:
        self.nodes = nodes
        self.store = self
        self.handlers: tuple = ()

    def add_handlers(self, *handlers) -> None:
        self.handlers = handlers

    def list(self) -> list[dict]:
        return self.nodes


class FakeInformers:
    def __init__(self, nodes: list[dict]) -> None:
        self.nodes = FakeInformer(nodes)
        self.asked: list[str] = []

    def informer(self, resource) -> FakeInformer:
        self.asked.append(resource.kind)
        return self.nodes


def test_without_a_folder_the_controller_watches_and_writes_nothing():
    informers = FakeInformers([node("n1", "10.0.0.1")])
    controller = PrometheusSDController(ControllerContext(client=None, informers=informers, workers=1))
    controller.start()
    controller.stop()
    assert informers.asked == []


def test_a_sync_writes_both_files_from_the_cached_nodes(tmp_path):
    informers = FakeInformers([node("n2", "10.0.0.2"), node("n1", "10.0.0.1")])
    controller = PrometheusSDController(ControllerContext(client=None, informers=informers, workers=1,
                                                         prometheus_sd_dir=str(tmp_path / "sd")))
    assert informers.asked == ["Node"]
    controller.sync("targets")
    kubelets = json.loads((tmp_path / "sd" / "kubelets.json").read_text())
    assert [group["labels"]["node"] for group in kubelets] == ["n1", "n2"]
    assert json.loads((tmp_path / "sd" / "proxies.json").read_text())[1]["targets"] == ["10.0.0.2:10249"]
    informers.nodes.nodes = [node("n2", "10.0.0.2")]  # n1 was removed
    controller.sync("targets")
    assert [group["labels"]["node"] for group in json.loads((tmp_path / "sd" / "kubelets.json").read_text())] == ["n2"]
