"""Fixtures for end-to-end tests against the cluster that ``scripts/cluster-up.sh`` stood up on this machine."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from daemons.api.resources import resolve

ADMIN_KUBECONFIG = Path.home() / ".kube" / "config"
OUR_KUBECTL = "/usr/local/bin/kubectl"
NAMESPACES = resolve("namespaces")
PODS = resolve("pods")


@pytest.fixture(scope="session")
def cluster() -> Iterator[ApiClient]:
    """An admin client for the installed cluster; fails clearly when there is none."""
    if not ADMIN_KUBECONFIG.exists() or not shutil.which(OUR_KUBECTL):
        pytest.fail(f"no installed cluster: {ADMIN_KUBECONFIG} or {OUR_KUBECTL} is missing — run "
                    "`bash scripts/cluster-up.sh` first (scripts/test.sh does)")
    client = ApiClient.from_config(ADMIN_KUBECONFIG)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def e2e_namespace(cluster: ApiClient) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:10]}"
    cluster.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            cluster.delete(NAMESPACES, name)


def run_kubectl(*args: str, binary: str = OUR_KUBECTL, check: bool = True, timeout: float = 60,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a kubectl (ours unless ``binary``) as the cluster's admin; ``check`` fails the test on a non-zero exit."""
    result = subprocess.run([binary, "--kubeconfig", str(ADMIN_KUBECONFIG), *args], capture_output=True, text=True,
                            timeout=timeout, input=stdin)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def wait_for(condition: Callable[[], Any], timeout: float = 60, interval: float = 0.5, what: str = "") -> Any:
    """Poll until ``condition()`` is truthy and return it; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or condition}")
        time.sleep(interval)


def client_pod() -> dict:
    """A busybox pod that only sleeps: tests run their requests from inside the cluster with it."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client"},
        "spec": {"terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "client", "image": "busybox", "command": ["sleep", "3600"]}]},
    }


def is_ready(cluster: ApiClient, namespace: str, name: str) -> bool:
    status = cluster.get(PODS, name, namespace).get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return status.get("phase") == "Running" and conditions.get("Ready") == "True"


def fetch_from_pod(namespace: str, url: str, pod: str = "client") -> str | None:
    """The body ``url`` answers inside ``pod``, None when the request fails."""
    # busybox's own `wget -T` crashes; its `timeout` applet bounds the request instead.
    result = run_kubectl("-n", namespace, "exec", pod, "--", "timeout", "3", "wget", "-qO-", url, check=False)
    return result.stdout.strip() if result.returncode == 0 else None
