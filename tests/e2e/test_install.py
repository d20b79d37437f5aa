"""The cluster that ``scripts/cluster-up.sh`` (``ansible-playbook site.yml``) stood up on this machine, checked as
a user would: its programs run and come back when killed, both kubectls reach it, the node is Ready with the pod
subnet flanneld leased it, Docker's bridge and the pods use that subnet, the ``kubernetes`` Service exists, the
registry serves the base images through Docker's mirror. That running the playbook again changes nothing is
molecule's idempotence step (``molecule test -s multinode``)."""

import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import upstream_kubectls
from tests.e2e.conftest import ADMIN_KUBECONFIG, run_kubectl, wait_for

CA_FILE = Path("/etc/minik8s/pki/ca.crt")
APISERVER_READYZ = "https://127.0.0.1:6443/readyz"
REGISTRY = "http://127.0.0.1:5000"
PROMETHEUS = "http://127.0.0.1:9090"
# Prometheus' scrape jobs (roles/prometheus); kubelet, cadvisor and proxy have one target per node.
PROMETHEUS_JOBS = {"prometheus", "apiserver", "scheduler", "controller-manager", "etcd", "kubelet", "cadvisor", "proxy"}
NODE_JOBS = {"kubelet", "cadvisor", "proxy"}

SUBNET_FILE = Path("/run/flannel/subnet.env")
CLUSTER_CIDR = ipaddress.ip_network("10.244.0.0/16")
SERVICE_IP = "10.96.0.1"

# Every long-running program of a single-node cluster, by its supervisord program / systemd unit name.
PROGRAMS = ("etcd", "rabbitmq-server", "docker", "docker-registry", "minik8s-apiserver", "minik8s-scheduler",
            "minik8s-controller-manager", "minik8s-flanneld", "minik8s-proxy", "minik8s-kubelet", "prometheus", "nginx",
            "dnsmasq")


def under_systemd() -> bool:
    return Path("/proc/1/comm").read_text().strip() == "systemd"


def program_states() -> dict[str, str]:
    """Each program's state: supervisord's (RUNNING, STARTING, ...) or systemd's (active, ...)."""
    if under_systemd():
        result = subprocess.run(["systemctl", "is-active", *PROGRAMS], capture_output=True, text=True)
        return dict(zip(PROGRAMS, result.stdout.split(), strict=False))
    result = subprocess.run(["supervisorctl", "status"], capture_output=True, text=True)
    states = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            states[fields[0]] = fields[1]
    return states


def running(state: str | None) -> bool:
    return state in ("RUNNING", "active")


def program_pids(script: str) -> set[int]:
    """Pids of the processes whose command line runs the console script ``script``."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(Path(arg.decode(errors="replace")).name == script for arg in argv[:2]):
            pids.add(int(proc.name))
    return pids


def apiserver_ready() -> bool:
    context = ssl.create_default_context(cafile=str(CA_FILE))
    try:
        with urllib.request.urlopen(APISERVER_READYZ, context=context, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def node_name() -> str:
    return socket.gethostname().split(".")[0]


def subnet_lease() -> dict[str, str]:
    """flanneld's subnet file: FLANNEL_NETWORK, FLANNEL_SUBNET (the bridge's address/prefix), FLANNEL_MTU."""
    assert SUBNET_FILE.exists(), f"{SUBNET_FILE} is missing: flanneld has no lease"
    return dict(line.split("=", 1) for line in SUBNET_FILE.read_text().split() if "=" in line)


@pytest.fixture(scope="module")
def installed():
    """Fail clearly when no cluster was stood up on this machine."""
    missing = [str(path) for path in (ADMIN_KUBECONFIG, CA_FILE, Path("/usr/local/bin/kubectl")) if not path.exists()]
    if missing:
        pytest.fail(f"no installed cluster ({', '.join(missing)} missing): run `bash scripts/cluster-up.sh` first")


def test_every_program_runs(installed):
    states = program_states()
    assert {name: states.get(name) for name in PROGRAMS if not running(states.get(name))} == {}


def test_our_kubectl_shows_this_node_ready(installed):
    name = node_name()

    def ready_row():
        output = run_kubectl("get", "nodes").stdout
        rows = [line.split() for line in output.splitlines()[1:]]
        return next((row for row in rows if row[0] == name and row[1] == "Ready"), None)

    row = wait_for(ready_row, 60, interval=1, what=f"node {name} to be Ready in `kubectl get nodes`")
    assert "control-plane" in row[2]


def test_the_node_leased_a_subnet_of_the_cluster_cidr(installed):
    lease = subnet_lease()
    assert ipaddress.ip_network(lease["FLANNEL_NETWORK"]) == CLUSTER_CIDR
    subnet = ipaddress.ip_interface(lease["FLANNEL_SUBNET"]).network
    assert subnet.subnet_of(CLUSTER_CIDR) and subnet.prefixlen == 24
    node = json.loads(run_kubectl("get", "node", node_name(), "-o", "json").stdout)
    assert node["spec"].get("podCIDR") == str(subnet)


def test_the_overlay_device_is_a_vxlan_on_this_machines_address(installed):
    link = json.loads(subprocess.run(["ip", "-d", "-j", "link", "show", "flannel.1"], capture_output=True, text=True,
                                     check=True).stdout)[0]
    assert link["linkinfo"]["info_kind"] == "vxlan"
    assert link["mtu"] == int(subnet_lease()["FLANNEL_MTU"])
    addresses = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show", "flannel.1"], capture_output=True,
                                          text=True, check=True).stdout)[0]["addr_info"]
    subnet = ipaddress.ip_interface(subnet_lease()["FLANNEL_SUBNET"]).network
    assert [info["local"] for info in addresses] == [str(subnet.network_address)]


def test_dockers_bridge_uses_the_nodes_subnet_and_leaves_masquerading_to_flanneld(installed):
    lease = subnet_lease()
    bridge = json.loads(subprocess.run(["docker", "network", "inspect", "bridge"], capture_output=True, text=True,
                                       check=True).stdout)[0]
    gateway = ipaddress.ip_interface(lease["FLANNEL_SUBNET"])
    assert bridge["IPAM"]["Config"][0]["Subnet"] == str(gateway.network)
    assert bridge["IPAM"]["Config"][0]["Gateway"] == str(gateway.ip)
    assert bridge["Options"]["com.docker.network.driver.mtu"] == lease["FLANNEL_MTU"]
    assert bridge["Options"]["com.docker.network.bridge.enable_ip_masquerade"] == "false"


def test_a_pod_gets_an_address_from_the_nodes_subnet(installed, e2e_namespace):
    subnet = ipaddress.ip_interface(subnet_lease()["FLANNEL_SUBNET"]).network
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "address"},
           "spec": {"containers": [{"name": "sleep", "image": "busybox", "command": ["sleep", "3600"]}]}}
    run_kubectl("-n", e2e_namespace, "apply", "-f", "-", stdin=json.dumps(pod))

    def pod_ip():
        status = json.loads(run_kubectl("-n", e2e_namespace, "get", "pod", "address", "-o", "json").stdout)["status"]
        return status.get("phase") == "Running" and status.get("podIP")

    address = wait_for(pod_ip, 90, what="pod address to be Running with an IP")
    assert ipaddress.ip_address(address) in subnet


def test_the_kubernetes_service_points_at_the_apiserver(installed):
    service = json.loads(run_kubectl("-n", "default", "get", "service", "kubernetes", "-o", "json").stdout)
    assert service["spec"]["clusterIP"] == SERVICE_IP
    assert [(port["port"], port["protocol"]) for port in service["spec"]["ports"]] == [(443, "TCP")]


def test_upstream_kubectl_reads_roots_kubeconfig(installed):
    kubectls = upstream_kubectls()
    assert kubectls, "no upstream kubectl on this machine: run scripts/test.sh, which installs one"
    binary = kubectls.get("1.33") or next(iter(kubectls.values()))
    # No --kubeconfig: upstream kubectl finds ~/.kube/config by itself, as a user's would.
    result = subprocess.run([str(binary), "get", "ns"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "KUBECONFIG": ""})
    assert result.returncode == 0, result.stderr
    names = {line.split()[0] for line in result.stdout.splitlines()[1:]}
    assert {"default", "kube-system"} <= names


def test_a_killed_apiserver_is_back_within_ten_seconds(installed):
    wait_for(apiserver_ready, 30, what="the apiserver to be ready before the kill")
    before = program_pids("minik8s-apiserver")
    assert before, "no minik8s-apiserver process"
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_for(lambda: program_pids("minik8s-apiserver") - before and apiserver_ready(), 10, interval=0.2,
             what="a new apiserver to serve /readyz")
    assert time.monotonic() - killed_at < 10
    run_kubectl("get", "ns")


@pytest.mark.parametrize("image", ["busybox", "nginx", "pause", "python"])
def test_the_registry_serves_the_base_images(installed, image):
    request = urllib.request.Request(
        f"{REGISTRY}/v2/library/{image}/manifests/latest",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"}, method="HEAD")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_docker_pulls_standard_names_through_the_registry_mirror(installed):
    # No public registry is reachable: a pull only works through the cluster registry, Docker's mirror.
    for image in ("busybox", "nginx"):
        result = subprocess.run(["docker", "pull", image], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    info = json.loads(subprocess.run(["docker", "info", "--format", "{{json .RegistryConfig.Mirrors}}"],
                                     capture_output=True, text=True, check=True).stdout)
    assert any(":5000" in mirror for mirror in info)


def prometheus_targets() -> list[dict]:
    with urllib.request.urlopen(f"{PROMETHEUS}/api/v1/targets?state=active", timeout=10) as response:
        return json.load(response)["data"]["activeTargets"]


def test_prometheus_scrapes_every_job_and_every_target_is_up(installed):
    last: dict[str, object] = {}

    def all_up():
        targets = prometheus_targets()
        last["missing jobs"] = sorted(PROMETHEUS_JOBS - {target["labels"]["job"] for target in targets})
        last["not up"] = [(target["scrapeUrl"], target["health"], target["lastError"]) for target in targets
                          if target["health"] != "up"]
        return not last["missing jobs"] and not last["not up"]

    # Targets are scraped every 15 s: the first scrape of each may still be ahead.
    try:
        wait_for(all_up, 60, interval=2, what="every job's targets up")
    except AssertionError as error:
        raise AssertionError(f"{error}; last seen: {last}") from None
    for job in NODE_JOBS:
        nodes = {target["labels"].get("node") for target in prometheus_targets() if target["labels"]["job"] == job}
        assert node_name() in nodes, (job, nodes)


def test_prometheus_has_the_nodes_container_metrics(installed):
    query = urllib.parse.urlencode({"query": 'container_cpu_usage_seconds_total{id="/"}'})

    def node_series():
        with urllib.request.urlopen(f"{PROMETHEUS}/api/v1/query?{query}", timeout=10) as response:
            return json.load(response)["data"]["result"]

    result = wait_for(node_series, 60, interval=2, what="the node's CPU series in Prometheus")
    assert {series["metric"]["node"] for series in result} >= {node_name()}
