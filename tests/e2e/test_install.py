"""The cluster that ``scripts/cluster-up.sh`` (``ansible-playbook site.yml``) stood up on this machine, checked as
a user would: its programs run and come back when killed, both kubectls reach it, the node is Ready, the registry
serves the base images through Docker's mirror, and running the playbook again changes nothing."""

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import upstream_kubectls
from tests.e2e.conftest import ADMIN_KUBECONFIG, run_kubectl, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = REPO_ROOT / ".tools" / "ansible" / "bin" / "ansible-playbook"
CA_FILE = Path("/etc/minik8s/pki/ca.crt")
APISERVER_READYZ = "https://127.0.0.1:6443/readyz"
REGISTRY = "http://127.0.0.1:5000"

# Every long-running program of a single-node cluster, by its supervisord program / systemd unit name.
PROGRAMS = ("etcd", "rabbitmq-server", "docker", "docker-registry", "minik8s-apiserver", "minik8s-scheduler",
            "minik8s-kubelet")


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


def changed_tasks(output: str) -> list[str]:
    """The names of the tasks that reported a change, from ansible-playbook's output."""
    names, task = [], None
    for line in output.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task = line[line.index("[") + 1:line.rindex("]")]
        elif line.startswith("changed:") and task and task not in names:
            names.append(task)
    return names


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
    name = socket.gethostname().split(".")[0]

    def ready_row():
        output = run_kubectl("get", "nodes").stdout
        rows = [line.split() for line in output.splitlines()[1:]]
        return next((row for row in rows if row[0] == name and row[1] == "Ready"), None)

    row = wait_for(ready_row, 60, interval=1, what=f"node {name} to be Ready in `kubectl get nodes`")
    assert "control-plane" in row[2]


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


def test_running_the_playbook_again_changes_nothing(installed):
    if not ANSIBLE_PLAYBOOK.exists():
        pytest.fail(f"{ANSIBLE_PLAYBOOK} is missing: run `bash scripts/cluster-up.sh` first")
    result = subprocess.run([str(ANSIBLE_PLAYBOOK), "site.yml"], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=1200, env={**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg")})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    recap = re.findall(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output, re.M)
    assert recap, output[-3000:]
    changed = {host: int(count) for host, _, count, _, _ in recap if int(count)}
    assert changed == {}, f"changed tasks: {changed_tasks(output)}"
    assert all(int(failed) == 0 and int(unreachable) == 0 for _, _, _, unreachable, failed in recap)
