"""Reading cgroup v1 and /proc into cAdvisor's series, and the text Prometheus scrapes from the kubelet."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemons.kubelet.cadvisor import (
    Identity,
    InterfaceCounters,
    Sample,
    cgroup_directory,
    parse_cgroup_mounts,
    parse_cpuacct_usage,
    parse_memory_stat,
    parse_net_dev,
    parse_proc_cgroup,
    render,
    working_set,
)
from daemons.kubelet.server import Route, parse_route

pytestmark = pytest.mark.unit

PROC_CGROUP = """\
12:name=systemd:/docker/abc
11:memory:/docker/abc
4:cpu,cpuacct:/docker/abc
0::/docker/abc
"""

MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /kubepods /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""

NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed
    lo:  120       2    0    0    0     0          0         0   120       2    0    0    0     0       0          0
  eth0: 5736      48    1    0    0     0          0         0  2046      21    3    0    0     0       0          0
"""


def test_a_containers_cgroups_by_controller():
    assert parse_proc_cgroup(PROC_CGROUP) == {
        "name=systemd": "/docker/abc", "memory": "/docker/abc", "cpu": "/docker/abc", "cpuacct": "/docker/abc"}


def test_cgroup_folders_follow_the_mounts_not_a_fixed_layout():
    mounts = parse_cgroup_mounts(MOUNTINFO)
    assert mounts["cpuacct"] == ("/", "/sys/fs/cgroup/cpu,cpuacct")
    assert "xattr" not in mounts and "cgroup2" not in mounts and "name=systemd" in mounts
    assert cgroup_directory(mounts, "cpuacct", "/docker/abc") == "/sys/fs/cgroup/cpu,cpuacct/docker/abc"
    assert cgroup_directory(mounts, "cpuacct", "/") == "/sys/fs/cgroup/cpu,cpuacct"
    # A hierarchy mounted from below its root: the mounted part of the path is not repeated.
    assert cgroup_directory(mounts, "memory", "/kubepods/pod1") == "/sys/fs/cgroup/memory/pod1"
    assert cgroup_directory(mounts, "blkio", "/docker/abc") is None


def test_cpu_in_seconds_and_working_set_without_inactive_cache():
    assert parse_cpuacct_usage("2500000000\n") == 2.5
    stat = parse_memory_stat("cache 4096\ninactive_file 1000\ntotal_inactive_file 3000\nrss 8192\n")
    assert stat["rss"] == 8192
    assert working_set(10_000, stat) == 7_000  # the hierarchical total counts
    assert working_set(10_000, {"inactive_file": 4_000}) == 6_000
    assert working_set(1_000, stat) == 0


def test_network_counters_without_loopback():
    assert parse_net_dev(NET_DEV) == {"eth0": InterfaceCounters(5736, 48, 1, 2046, 21, 3)}


def families(text: bytes) -> dict[str, list]:
    return {family.name: family.samples for family in text_string_to_metric_families(text.decode())}


def test_exposition_has_cadvisors_names_and_labels():
    pod = dict(namespace="shop", pod="web-1", image="nginx:latest")
    samples = [
        Sample(Identity("/"), cpu_seconds=100.0, memory_usage=2048, memory_working_set=1024,
               network={"eth0": InterfaceCounters(1, 2, 0, 3, 4, 0)}),
        Sample(Identity("/docker/p", name="k8s_POD_web-1_shop_1234abcd", container="POD", **pod), cpu_seconds=0.01,
               memory_usage=10, memory_working_set=5, network={"eth0": InterfaceCounters(500, 5, 0, 700, 7, 0)}),
        Sample(Identity("/docker/a", name="k8s_server_web-1_shop_1234abcd_0", container="server", **pod),
               cpu_seconds=1.5, memory_usage=4096, memory_working_set=3000),
    ]
    found = families(render(samples))
    cpu = {sample.labels["container"]: sample for sample in found["container_cpu_usage_seconds"]}
    assert cpu["server"].name == "container_cpu_usage_seconds_total"
    assert cpu["server"].value == 1.5
    assert cpu["server"].labels == {"container": "server", "pod": "web-1", "namespace": "shop", "id": "/docker/a",
                                    "image": "nginx:latest", "name": "k8s_server_web-1_shop_1234abcd_0"}
    assert cpu[""].labels["id"] == "/" and cpu[""].labels["pod"] == "" and cpu[""].value == 100.0
    working = {sample.labels["id"]: sample.value for sample in found["container_memory_working_set_bytes"]}
    assert working == {"/": 1024, "/docker/p": 5, "/docker/a": 3000}
    assert {sample.labels["id"]: sample.value for sample in found["container_memory_usage_bytes"]}["/docker/a"] == 4096
    received = found["container_network_receive_bytes"]
    assert {(s.labels["container"], s.labels["interface"], s.value) for s in received} == {
        ("", "eth0", 1), ("POD", "eth0", 500)}
    assert {s.value for s in found["container_network_transmit_packets"] if s.labels["container"] == "POD"} == {7}


def test_unreadable_counters_leave_their_series_out():
    found = families(render([Sample(Identity("/docker/x", container="c", pod="p", namespace="n"), cpu_seconds=1.0)]))
    assert len(found["container_cpu_usage_seconds"]) == 1
    assert found["container_memory_working_set_bytes"] == []


@pytest.mark.parametrize(("method", "path", "route"), [
    ("GET", "/metrics/cadvisor", Route("cadvisor")),
    ("GET", "/metrics", Route("metrics")),
    ("POST", "/metrics/cadvisor", None),
    ("GET", "/metrics/probes", None),
])
def test_metrics_routes(method, path, route):
    assert parse_route(method, path) == route
