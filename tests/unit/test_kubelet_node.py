"""The Node the kubelet registers: config file, labels, taints, capacity and the Ready heartbeat."""

from datetime import UTC, datetime

import pytest

from daemons.kubelet.node import (
    HostInfo,
    merged_taints,
    node_lease,
    node_object,
    node_status,
    parse_meminfo,
    parse_os_release,
    ready_condition,
    renewed_lease,
    status_differs,
)
from daemons.kubelet.settings import KubeletSettings, NodeConfig, load_node_config
from daemons.machinery.settings import parse_settings

INFO = HostInfo(hostname="vm1", cpus=4, memory_kib=8000000, os_image="Debian GNU/Linux 12 (bookworm)",
                kernel_version="6.1.0", architecture="amd64", machine_id="m1", boot_id="b1")
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def test_settings_defaults_and_flags():
    settings = parse_settings(KubeletSettings, ["--node-config", "/etc/n.yaml", "--cluster-dns", "10.96.0.10",
                                                "--cluster-domain", "cluster.local"], environ={})
    assert (settings.port, settings.root_dir, settings.docker_url, settings.pod_infra_image) == (
        10250, "/var/lib/minik8s/kubelet", "unix:///var/run/docker.sock", "pause:latest")
    assert (settings.status_interval, settings.resync_seconds) == (10, 30)
    assert (settings.node_lease_duration_seconds, settings.node_status_report_frequency) == (40, 300)
    assert settings.cluster_dns == ["10.96.0.10"] and settings.cluster_domain == "cluster.local"
    assert settings.tls_cert_file is None and settings.authentication_token_file is None


def test_node_config_file(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("name: worker-1\nlabels: {disk: ssd}\nroles: [worker, gpu]\naddress: 192.0.2.7\n"
                    "taints: [{key: gpu, value: 'yes', effect: NoSchedule}]\n")
    config = load_node_config(path)
    assert config.node_labels() == {"disk": "ssd", "node-role.kubernetes.io/worker": "",
                                    "node-role.kubernetes.io/gpu": ""}
    assert config.taints_json() == [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    assert config.address == "192.0.2.7"


@pytest.mark.parametrize(("text", "message"), [
    ("labels: {}\n", "name"), ("name: Bad_Name\n", "name"), ("name: n\ncolour: red\n", "colour"),
    ("name: n\ntaints: [{key: k, effect: Sometimes}]\n", "taints.0.effect"), ("name: [\n", "cannot read"),
])
def test_bad_node_configs_name_the_field(tmp_path, text, message):
    path = tmp_path / "node.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_node_config(path)


def test_host_files_are_parsed():
    assert parse_meminfo("MemTotal:       24683852 kB\nMemFree: 1 kB\n") == 24683852
    assert parse_os_release('NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n') == \
        "Debian GNU/Linux 12 (bookworm)"
    assert parse_os_release("") == "Linux"


def test_the_node_object_carries_labels_roles_and_taints():
    config = NodeConfig(name="worker-1", labels={"disk": "ssd"}, roles=["worker"],
                        taints=[{"key": "k", "effect": "NoSchedule"}])
    node = node_object(config, INFO)
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": "worker-1", "kubernetes.io/os": "linux",
                                          "kubernetes.io/arch": "amd64", "disk": "ssd",
                                          "node-role.kubernetes.io/worker": ""}
    assert node["spec"] == {"taints": [{"key": "k", "effect": "NoSchedule"}]}


def test_configured_taints_are_added_without_dropping_others():
    current = [{"key": "manual", "effect": "NoExecute"}, {"key": "k", "value": "old", "effect": "NoSchedule"}]
    wanted = [{"key": "k", "value": "new", "effect": "NoSchedule"}, {"key": "z", "effect": "NoSchedule"}]
    assert merged_taints(current, wanted) == [*current, {"key": "z", "effect": "NoSchedule"}]


def test_node_status_reports_capacity_addresses_and_versions():
    status = node_status(INFO, "192.0.2.7", 10250, "20.10.24", True, "kubelet is posting ready status", NOW)
    assert status["capacity"] == status["allocatable"] == {"cpu": "4", "memory": "8000000Ki", "pods": "110"}
    assert status["addresses"] == [{"type": "InternalIP", "address": "192.0.2.7"},
                                   {"type": "Hostname", "address": "vm1"}]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    info = status["nodeInfo"]
    assert (info["kubeletVersion"], info["containerRuntimeVersion"]) == ("v1.30.0-minik8s", "docker://20.10.24")
    assert (info["osImage"], info["kernelVersion"], info["operatingSystem"], info["architecture"]) == (
        "Debian GNU/Linux 12 (bookworm)", "6.1.0", "linux", "amd64")
    assert status["conditions"][0]["type"] == "Ready" and status["conditions"][0]["status"] == "True"


def test_the_heartbeat_moves_but_the_transition_time_stays():
    first = ready_condition(True, "ok", NOW, None)
    later = ready_condition(True, "ok", NOW.replace(minute=5), first)
    assert later["lastHeartbeatTime"] == "2026-01-01T12:05:00Z"
    assert later["lastTransitionTime"] == first["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    down = ready_condition(False, "container runtime is down", NOW.replace(minute=6), later)
    assert (down["status"], down["reason"], down["lastTransitionTime"]) == ("False", "KubeletNotReady",
                                                                           "2026-01-01T12:06:00Z")


def test_only_a_change_beyond_the_heartbeat_time_needs_the_status_posted():
    posted = node_status(INFO, "192.0.2.7", 10250, "20.10.24", True, "kubelet is posting ready status", NOW)
    stored = {**posted, "volumesInUse": ["v1"]}  # fields others write are not ours to compare
    ready = posted["conditions"][0]
    again = node_status(INFO, "192.0.2.7", 10250, "20.10.24", True, "kubelet is posting ready status",
                        NOW.replace(minute=1), ready)
    assert not status_differs(stored, again)
    runtime_down = node_status(INFO, "192.0.2.7", 10250, "20.10.24", False, "container runtime is down",
                               NOW.replace(minute=1), ready)
    assert status_differs(stored, runtime_down)
    marked_unknown = {**stored, "conditions": [{**ready, "status": "Unknown", "reason": "NodeStatusUnknown"}]}
    assert status_differs(marked_unknown, again)
    assert status_differs({**stored, "addresses": []}, again)


def test_the_node_lease_is_held_by_and_owned_by_its_node_and_renewal_moves_only_the_renew_time():
    lease = node_lease("n1", "uid-n1", 40, NOW)
    assert lease["metadata"] == {"name": "n1", "namespace": "kube-node-lease", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1"}]}
    assert lease["spec"] == {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                             "renewTime": "2026-01-01T12:00:00.000000Z"}
    stored = {**lease, "metadata": {**lease["metadata"], "resourceVersion": "7"}}
    renewed = renewed_lease(stored, "n1", 40, NOW.replace(second=10))
    assert renewed["metadata"]["resourceVersion"] == "7"
    assert renewed["spec"]["renewTime"] == "2026-01-01T12:00:10.000000Z"
    assert stored["spec"]["renewTime"] == "2026-01-01T12:00:00.000000Z"
