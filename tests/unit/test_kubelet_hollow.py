"""The hollow kubelet's pure parts: node names, flags, the nodes' capacity, pod addresses and the Running status."""

from datetime import UTC, datetime, timedelta
from ipaddress import ip_network

import pytest

from daemons.kubelet.hollow import (
    HOLLOW_POD_RANGE,
    hollow_host_info,
    hollow_node_names,
    hollow_pod_cidr,
    hollow_pod_status,
    pick_pod_ip,
)
from daemons.kubelet.node import HostInfo, node_status
from daemons.kubelet.settings import KubeletSettings
from daemons.kubelet.status import status_patch
from daemons.machinery.settings import parse_settings

pytestmark = pytest.mark.unit

MACHINE = HostInfo(hostname="vm1", cpus=2, memory_kib=8000000, os_image="Debian GNU/Linux 12 (bookworm)",
                   kernel_version="6.1.0", architecture="amd64", machine_id="m1", boot_id="b1")
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def settings(*flags: str) -> KubeletSettings:
    return parse_settings(KubeletSettings, ["--node-config", "/etc/n.yaml", *flags], environ={})


def test_node_names_are_the_config_name_and_a_zero_padded_index():
    assert hollow_node_names("hollow-a", 3) == ["hollow-a-0000", "hollow-a-0001", "hollow-a-0002"]
    names = hollow_node_names("h", 10001)
    assert (names[0], names[-1], len(set(names))) == ("h-00000", "h-10000", 10001)


def test_hollow_flags():
    parsed = settings("--hollow", "--hollow-nodes", "20", "--hollow-cpu", "8", "--hollow-memory", "32Gi",
                      "--hollow-max-pods", "30")
    assert (parsed.hollow, parsed.hollow_nodes, parsed.hollow_cpu, parsed.hollow_max_pods) == (True, 20, 8, 30)
    assert parsed.hollow_memory_kib() == 32 * 1024 * 1024
    plain = settings()
    assert (plain.hollow, plain.hollow_nodes, plain.hollow_memory_kib()) == (False, 1, 16 * 1024 * 1024)


@pytest.mark.parametrize(("flags", "message"), [
    (["--hollow-nodes", "5"], "--hollow-nodes given without --hollow"),
    (["--hollow-cpu", "2", "--hollow-max-pods", "9"], "--hollow-cpu, --hollow-max-pods given without --hollow"),
    (["--hollow", "--hollow-nodes", "0"], "--hollow-nodes"),
    (["--hollow", "--hollow-memory", "lots"], "--hollow-memory"),
])
def test_bad_hollow_flags_name_the_flag(capsys, flags, message):
    with pytest.raises(SystemExit):
        settings(*flags)
    assert message in capsys.readouterr().err


def test_a_hollow_node_reports_its_configured_capacity_and_runtime():
    info = hollow_host_info("hollow-a-0007", 4, 16 * 1024 * 1024, MACHINE)
    assert (info.hostname, info.cpus, info.memory_kib, info.os_image) == (
        "hollow-a-0007", 4, 16777216, MACHINE.os_image)
    assert info.machine_id != hollow_host_info("hollow-a-0008", 4, 1, MACHINE).machine_id
    assert info.machine_id == hollow_host_info("hollow-a-0007", 4, 1, MACHINE).machine_id  # stable over restarts
    status = node_status(info, "192.0.2.7", 10250, "0.1.0", True, "kubelet is posting ready status", NOW,
                         runtime_name="hollow", max_pods=30)
    assert status["capacity"] == {"cpu": "4", "memory": "16777216Ki", "pods": "30"}
    assert status["nodeInfo"]["containerRuntimeVersion"] == "hollow://0.1.0"
    assert {"type": "Hostname", "address": "hollow-a-0007"} in status["addresses"]


def test_pod_ranges_are_private_per_node_and_stable():
    first = ip_network(hollow_pod_cidr("hollow-a-0000"))
    assert first.prefixlen == 24 and first.subnet_of(HOLLOW_POD_RANGE)
    assert hollow_pod_cidr("hollow-a-0000") == str(first)
    assert hollow_pod_cidr("hollow-a-0001") != str(first)


def test_pod_addresses_are_the_lowest_free_hosts():
    assert pick_pod_ip("10.1.2.0/24", []) == "10.1.2.2"  # .1 is the node's bridge
    assert pick_pod_ip("10.1.2.0/24", {"10.1.2.2", "10.1.2.4"}) == "10.1.2.3"
    with pytest.raises(ValueError, match="no free pod address"):
        pick_pod_ip("10.1.2.0/30", ["10.1.2.2"])


def pod(status: dict | None = None) -> dict:
    return {"metadata": {"name": "web-1", "namespace": "default", "uid": "u-1"},
            "spec": {"nodeName": "hollow-a-0000", "containers": [{"name": "app", "image": "nginx"},
                                                                  {"name": "log", "image": "busybox"}]},
            "status": status or {"phase": "Pending"}}


def test_a_bound_pod_is_reported_running_and_ready():
    status = hollow_pod_status(pod(), "192.0.2.7", "100.64.3.2", NOW)
    assert status["phase"] == "Running"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "PodScheduled": "True", "Initialized": "True", "ContainersReady": "True", "Ready": "True"}
    assert (status["hostIP"], status["podIP"], status["podIPs"]) == ("192.0.2.7", "100.64.3.2", [{"ip": "100.64.3.2"}])
    assert [(c["name"], c["containerID"], c["ready"], c["state"]) for c in status["containerStatuses"]] == [
        ("app", "hollow://u-1/app", True, {"running": {"startedAt": "2026-01-01T12:00:00Z"}}),
        ("log", "hollow://u-1/log", True, {"running": {"startedAt": "2026-01-01T12:00:00Z"}}),
    ]


def test_a_pod_reported_running_is_not_written_again():
    reported = hollow_pod_status(pod(), "192.0.2.7", "100.64.3.2", NOW)
    later = hollow_pod_status(pod(reported), "192.0.2.7", "100.64.3.2", NOW + timedelta(minutes=5))
    assert later == reported
    assert status_patch(reported, later) is None
    assert status_patch({"phase": "Pending"}, reported) is not None
