from datetime import UTC, datetime, timedelta

import pytest

from daemons.api import models, tables
from daemons.api.bundle import Resource
from daemons.api.kinds.endpoints import endpoints_text
from daemons.api.kinds.node import node_roles, node_status
from daemons.api.kinds.pod import pod_status_reason
from daemons.api.resources import resolve
from daemons.api.times import human_duration

pytestmark = pytest.mark.unit

WIDGETS = Resource("Widget", "widgets", models.KubeObject)
NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def created(seconds_ago: int) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(5, "5s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (3 * 3600 + 120, "3h2m"), (9 * 3600, "9h"),
     (3 * 86400 + 4 * 3600, "3d4h"), (20 * 86400, "20d"), (800 * 86400, "2y70d")],
)
def test_human_duration_matches_kubectl(seconds, text):
    assert human_duration(seconds) == text


def running_pod(**status):
    return {
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": created(90)},
        "spec": {"nodeName": "node1", "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
        "status": {"phase": "Running", "podIP": "10.244.1.5", **status},
    }


def test_pod_row_has_upstream_columns_and_wide_ones_by_priority():
    pod = running_pod(containerStatuses=[
        {"name": "a", "ready": True, "restartCount": 2, "state": {"running": {}},
         "lastState": {"terminated": {"finishedAt": created(30)}}},
        {"name": "b", "ready": False, "restartCount": 0, "state": {"running": {}}},
    ])
    table = tables.table(resolve("pods"), [pod], "7", now=NOW)
    names = [(column["name"], column["priority"]) for column in table["columnDefinitions"]]
    assert names[:5] == [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0)]
    assert ("IP", 1) in names and ("Node", 1) in names
    assert table["rows"][0]["cells"][:7] == ["web", "1/2", "Running", "2 (30s ago)", "90s", "10.244.1.5", "node1"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


@pytest.mark.parametrize(
    ("statuses", "deleting", "expected"),
    [
        ([{"name": "a", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}], False, "CrashLoopBackOff"),
        ([{"name": "a", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}], False, "Completed"),
        ([{"name": "a", "state": {"terminated": {"exitCode": 3}}}], False, "ExitCode:3"),
        ([{"name": "a", "ready": True, "state": {"running": {}}}], True, "Terminating"),
    ],
)
def test_pod_status_column(statuses, deleting, expected):
    pod = running_pod(containerStatuses=statuses)
    if deleting:
        pod["metadata"]["deletionTimestamp"] = created(0)
    assert pod_status_reason(pod) == expected


def test_node_row_shows_readiness_cordon_and_roles():
    node = {
        "metadata": {"name": "n1", "creationTimestamp": created(3600),
                     "labels": {"node-role.kubernetes.io/control-plane": ""}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.30.0"},
                   "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}]},
    }
    cells = tables.table(resolve("nodes"), [node], "1", now=NOW)["rows"][0]["cells"]
    assert cells[:6] == ["n1", "Ready,SchedulingDisabled", "control-plane", "60m", "v1.30.0", "192.0.2.10"]


def test_node_columns_are_upstreams_with_the_pod_cidr_last():
    columns = [(c["name"], c["priority"]) for c in tables.column_definitions(resolve("nodes"))]
    assert columns == [("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0), ("Internal-IP", 1),
                       ("External-IP", 1), ("OS-Image", 1), ("Kernel-Version", 1), ("Container-Runtime", 1),
                       ("Pod-CIDR", 1)]


def test_node_wide_cells():
    node = {
        "metadata": {"name": "n2", "creationTimestamp": created(90)},
        "spec": {"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "Hostname", "address": "n2"}, {"type": "InternalIP", "address": "192.0.2.2"},
                                 {"type": "ExternalIP", "address": "198.51.100.2"}],
                   "nodeInfo": {"kubeletVersion": "v1.30.0-minik8s", "osImage": "Debian GNU/Linux 12 (bookworm)",
                                "kernelVersion": "6.1.0-18-amd64", "containerRuntimeVersion": "docker://20.10.24"}},
    }
    assert tables.table(resolve("nodes"), [node], "1", now=NOW)["rows"][0]["cells"] == [
        "n2", "Ready", "<none>", "90s", "v1.30.0-minik8s", "192.0.2.2", "198.51.100.2",
        "Debian GNU/Linux 12 (bookworm)", "6.1.0-18-amd64", "docker://20.10.24", "10.244.3.0/24"]
    bare = tables.table(resolve("nodes"), [{"metadata": {"name": "n3"}}], "1", now=NOW)["rows"][0]["cells"]
    assert bare == ["n3", "Unknown", "<none>", "<unknown>", "", "<none>", "<none>", "<unknown>", "<unknown>",
                    "<unknown>", "<none>"]


@pytest.mark.parametrize(("conditions", "unschedulable", "status"), [
    ([{"type": "Ready", "status": "True"}], False, "Ready"),
    ([{"type": "Ready", "status": "False"}], False, "NotReady"),
    ([{"type": "Ready", "status": "Unknown"}], False, "NotReady"),
    ([{"type": "MemoryPressure", "status": "False"}], False, "Unknown"),
    ([], True, "Unknown,SchedulingDisabled"),
    ([{"type": "Ready", "status": "Unknown"}], True, "NotReady,SchedulingDisabled"),
])
def test_node_status_column(conditions, unschedulable, status):
    node = {"metadata": {"name": "n"}, "spec": {"unschedulable": unschedulable}, "status": {"conditions": conditions}}
    assert node_status(node) == status


@pytest.mark.parametrize(("labels", "roles"), [
    ({}, "<none>"),
    ({"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "true"}, "control-plane,worker"),
    ({"node-role.kubernetes.io/": "", "kubernetes.io/role": ""}, "<none>"),
    ({"kubernetes.io/role": "master", "node-role.kubernetes.io/master": ""}, "master"),
    ({"kubernetes.io/role": "gpu", "disk": "ssd"}, "gpu"),
])
def test_node_roles_column(labels, roles):
    assert node_roles({"metadata": {"labels": labels}}) == roles


def test_service_and_endpoints_cells():
    service = {"metadata": {"name": "web", "creationTimestamp": created(10)},
               "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                        "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}], "selector": {"app": "web"}}}
    assert tables.table(resolve("services"), [service], "1", now=NOW)["rows"][0]["cells"] == [
        "web", "NodePort", "10.96.0.10", "<none>", "80:30080/TCP", "10s", "app=web"]
    endpoints = {"metadata": {"name": "web"}, "subsets": [
        {"addresses": [{"ip": f"10.244.0.{i}"} for i in range(1, 6)], "ports": [{"port": 8080}]}]}
    assert endpoints_text(endpoints) == "10.244.0.1:8080,10.244.0.2:8080,10.244.0.3:8080 + 2 more..."


def test_service_columns_are_upstreams():
    columns = [(c["name"], c["priority"]) for c in tables.column_definitions(resolve("services"))]
    assert columns == [("Name", 0), ("Type", 0), ("Cluster-IP", 0), ("External-IP", 0), ("Port(s)", 0), ("Age", 0),
                       ("Selector", 1)]
    assert [c["name"] for c in tables.column_definitions(resolve("endpoints"))] == ["Name", "Endpoints", "Age"]


@pytest.mark.parametrize(("spec", "status", "cells"), [
    ({"type": "ClusterIP", "clusterIPs": ["10.96.0.1"], "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
     {}, ["ClusterIP", "10.96.0.1", "<none>", "443/TCP", "<none>"]),
    ({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"], "selector": {"b": "2", "a": "1"}},
     {}, ["ClusterIP", "None", "<none>", "<none>", "a=1,b=2"]),
    ({"type": "NodePort", "clusterIPs": ["10.96.3.4"], "externalIPs": ["192.0.2.9"],
      "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"},
                {"port": 53, "nodePort": 30053, "protocol": "UDP"}]},
     {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}},
     ["NodePort", "10.96.3.4", "192.0.2.9", "80:30080/TCP,53:30053/UDP", "<none>"]),
    ({"type": "LoadBalancer", "clusterIPs": ["10.96.3.5"],
      "ports": [{"port": 80, "nodePort": 31000, "protocol": "TCP"}]},
     {"loadBalancer": {}}, ["LoadBalancer", "10.96.3.5", "<pending>", "80:31000/TCP", "<none>"]),
    ({"type": "LoadBalancer", "clusterIPs": ["10.96.3.5"], "externalIPs": ["192.0.2.9"]},
     {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}, {"hostname": "lb.example"}]}},
     ["LoadBalancer", "10.96.3.5", "203.0.113.1,lb.example,192.0.2.9", "<none>", "<none>"]),
    ({"type": "ExternalName", "externalName": "db.example.com"}, {},
     ["ExternalName", "<none>", "db.example.com", "<none>", "<none>"]),
])
def test_service_cells_by_type(spec, status, cells):
    service = {"metadata": {"name": "s", "creationTimestamp": created(5)}, "spec": spec, "status": status}
    row = tables.table(resolve("services"), [service], "1", now=NOW)["rows"][0]["cells"]
    assert row[1:5] + row[6:] == cells


def test_endpoints_list_each_port_of_each_subset_as_kubectl():
    two_ports = {"subsets": [{"addresses": [{"ip": "10.244.1.5"}, {"ip": "10.244.2.7"}],
                              "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}]}]}
    assert endpoints_text(two_ports) == "10.244.1.5:8080,10.244.2.7:8080,10.244.1.5:9090 + 1 more..."
    assert endpoints_text({"subsets": [{"addresses": [{"ip": "10.244.1.5"}]}]}) == "10.244.1.5"
    assert endpoints_text({"subsets": [{"addresses": [{"ip": "fd00::5"}], "ports": [{"port": 80}]}]}) \
        == "[fd00::5]:80"
    assert endpoints_text({"subsets": [{"notReadyAddresses": [{"ip": "10.244.1.5"}],
                                               "ports": [{"port": 80}]}]}) == ""
    assert endpoints_text({"metadata": {"name": "web"}}) == "<none>"


def test_deployment_and_replicaset_rows():
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
    spec = {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template}
    meta = {"name": "web", "creationTimestamp": created(30)}
    deployment = {"metadata": meta, "spec": spec, "status": {"readyReplicas": 2, "updatedReplicas": 3,
                                                            "availableReplicas": 2}}
    assert tables.table(resolve("deployments"), [deployment], "1", now=NOW)["rows"][0]["cells"] == [
        "web", "2/3", 3, 2, "30s", "web", "nginx", "app=web"]
    replicaset = {"metadata": meta, "spec": spec, "status": {"replicas": 3, "readyReplicas": 1}}
    cells = tables.table(resolve("replicasets"), [replicaset], "1", now=NOW)["rows"][0]["cells"]
    assert cells[:5] == ["web", 3, 3, 1, "30s"]


def test_unknown_kind_gets_name_and_age():
    table = tables.table(WIDGETS, [{"metadata": {"name": "w", "creationTimestamp": created(1)}}], "1", now=NOW,
                         include_object="None")
    assert table["rows"] == [{"cells": ["w", "1s"]}]
