"""Crash every component of the installed cluster in turn, under load, and check nothing a user relies on breaks.

In one namespace a "steady" Deployment answers HTTP behind a ClusterIP Service that a client thread calls from
the host ten times a second; a "churn" Deployment has its pods deleted and its template changed all the time so
its controllers are always busy; twenty more objects are recorded with their uids. Each fault SIGKILLs one
supervisord program (then all of them together); after supervisord restarts it the cluster must converge within
60 s: every recorded object still there with its uid, every Deployment at its replicas and within its surge, the
steady pods' containers untouched, a new pod running, and no request lost while only the control plane (or the
kubelet) was down.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from daemons.api import kubeconfig
from daemons.api.client import ApiClient
from daemons.api.errors import APIError, ConnectionFailed, MiniK8sError, NotFound
from daemons.api.resources import Resource, resolve
from tests.chaos.conftest import FIGURES, FaultFigures, kill_programs, program_pids, wait_restarted
from tests.e2e.conftest import ADMIN_KUBECONFIG, is_ready, wait_for

pytestmark = pytest.mark.chaos

NAMESPACES = resolve("namespaces")
PODS = resolve("pods")
SERVICES = resolve("services")
ENDPOINTS = resolve("endpoints")
DEPLOYMENTS = resolve("deployments")
DNS = resolve("dns")

APISERVER, SCHEDULER, CONTROLLER_MANAGER = "minik8s-apiserver", "minik8s-scheduler", "minik8s-controller-manager"
KUBELET, PROXY, BROKER, ETCD = "minik8s-kubelet", "minik8s-proxy", "rabbitmq-server", "etcd"
# While only these are down, running pods and the rules that reach them must not notice: the control plane, and
# the kubelet, which adopts its running containers (ready ones stay ready) when it comes back.
SERVICE_KEEPS_ANSWERING = {APISERVER, SCHEDULER, CONTROLLER_MANAGER, BROKER, ETCD, KUBELET}
FAULTS: list[tuple[str, tuple[str, ...]]] = [
    ("apiserver", (APISERVER,)),
    ("scheduler", (SCHEDULER,)),
    ("controller-manager", (CONTROLLER_MANAGER,)),
    ("kubelet", (KUBELET,)),
    ("proxy", (PROXY,)),
    ("broker", (BROKER,)),
    ("etcd", (ETCD,)),
    ("all at once", (APISERVER, SCHEDULER, CONTROLLER_MANAGER, KUBELET, PROXY, BROKER, ETCD)),
]
CONVERGENCE_S = 60
MAX_SURGE = 1
STEADY_REPLICAS, CHURN_REPLICAS = 2, 3
SELECTORLESS_SERVICES, DNS_OBJECTS = 14, 6
# Longer than the apiserver's own etcd timeout: a request it leaves hanging shows as a slow answer, not a lost one.
API_PROBE_TIMEOUT_S = 20

STEADY_COMMAND = "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"
API_ERRORS = (MiniK8sError, httpx.HTTPError)


def deployment(name: str, replicas: int, command: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": MAX_SURGE, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                    "name": name, "image": "busybox", "command": command,
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                }]},
            },
        },
    }


def active(pod: dict[str, Any]) -> bool:
    """Counted against a ReplicaSet's replicas: not being deleted and not finished."""
    return not pod["metadata"].get("deletionTimestamp") and pod.get("status", {}).get("phase") not in (
        "Succeeded", "Failed")


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}
    return pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True"


def containers_of(pod: dict[str, Any]) -> dict[str, tuple[str, int]]:
    return {status["name"]: (status.get("containerID", ""), status.get("restartCount", 0))
            for status in pod.get("status", {}).get("containerStatuses") or []}


class Traffic(threading.Thread):
    """Calls the steady Service from the host on a fresh connection ten times a second, recording each outcome."""

    def __init__(self, address: str) -> None:
        super().__init__(name="chaos-traffic", daemon=True)
        self.address = address
        self.outcomes: list[tuple[float, bool]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            sent = time.monotonic()
            connection = http.client.HTTPConnection(self.address, 80, timeout=1)
            try:
                connection.request("GET", "/")
                ok = connection.getresponse().status == 200
            except (OSError, http.client.HTTPException):
                ok = False
            finally:
                connection.close()
            self.outcomes.append((sent, ok))
            self.stopping.wait(max(0.0, 0.1 - (time.monotonic() - sent)))

    def between(self, start: float, end: float) -> tuple[int, int]:
        """Requests served and failed that were sent from ``start`` to ``end``."""
        window = [ok for sent, ok in list(self.outcomes) if start <= sent <= end]
        return sum(window), len(window) - sum(window)


class ApiProbe(threading.Thread):
    """Reads one object from the apiserver five times a second, recording how it answered and how fast."""

    def __init__(self, namespace: str) -> None:
        super().__init__(name="chaos-api-probe", daemon=True)
        self.namespace = namespace
        self.answers: list[tuple[float, str, float]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with ApiClient(kubeconfig.load(ADMIN_KUBECONFIG), timeout=API_PROBE_TIMEOUT_S) as client:
            while not self.stopping.is_set():
                sent = time.monotonic()
                try:
                    client.get(SERVICES, "steady", self.namespace)
                    answer = "200"
                except APIError as error:
                    answer = str(error.code)
                except ConnectionFailed:
                    answer = "unreachable"
                self.answers.append((sent, answer, time.monotonic() - sent))
                self.stopping.wait(max(0.0, 0.2 - (time.monotonic() - sent)))

    def between(self, start: float, end: float) -> tuple[collections.Counter[str], float]:
        """How the API answered requests sent from ``start`` to ``end``, and the slowest answer in seconds."""
        window = [(answer, took) for sent, answer, took in list(self.answers) if start <= sent <= end]
        return collections.Counter(answer for answer, _took in window), max((took for _answer, took in window),
                                                                            default=0.0)


class Churn(threading.Thread):
    """Keeps the churn Deployment's controllers busy: deletes one of its pods a second, rolls it every 8 s."""

    def __init__(self, namespace: str) -> None:
        super().__init__(name="chaos-churn", daemon=True)
        self.namespace = namespace
        self.running = threading.Event()
        self.stopping = threading.Event()
        self.deleted = self.rollouts = 0

    def run(self) -> None:
        with ApiClient.from_config(ADMIN_KUBECONFIG) as client:
            round_ = 0
            while not self.stopping.wait(1):
                if not self.running.is_set():
                    continue
                round_ += 1
                with contextlib.suppress(*API_ERRORS):
                    pods = [pod for pod in client.list(PODS, self.namespace, label_selector="app=churn")["items"]
                            if active(pod)]
                    if pods:
                        oldest = min(pods, key=lambda pod: pod["metadata"]["creationTimestamp"])
                        client.delete(PODS, oldest["metadata"]["name"], self.namespace)
                        self.deleted += 1
                    if round_ % 8 == 0:
                        patch = {"spec": {"template": {"metadata": {"annotations": {"chaos/round": str(round_)}}}}}
                        client.patch(DEPLOYMENTS, "churn", patch, self.namespace)
                        self.rollouts += 1


class PodCounter(threading.Thread):
    """Samples the active pods of each Deployment (all its ReplicaSets together) twice a second."""

    def __init__(self, namespace: str) -> None:
        super().__init__(name="chaos-pod-counter", daemon=True)
        self.namespace = namespace
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with ApiClient.from_config(ADMIN_KUBECONFIG) as client:
            while not self.stopping.wait(0.5):
                with contextlib.suppress(*API_ERRORS):
                    counts = {"steady": 0, "churn": 0}
                    for pod in client.list(PODS, self.namespace)["items"]:
                        app = pod["metadata"].get("labels", {}).get("app")
                        if app in counts and active(pod):
                            counts[app] += 1
                    self.samples.append((time.monotonic(), counts))

    def max_between(self, start: float, end: float) -> dict[str, int]:
        maxima: dict[str, int] = {}
        for sampled, counts in list(self.samples):
            if start <= sampled <= end:
                for app, count in counts.items():
                    maxima[app] = max(maxima.get(app, 0), count)
        return maxima


@dataclass
class Scenario:
    client: ApiClient
    namespace: str
    objects: dict[tuple[Resource, str], str]
    steady_containers: dict[str, dict[str, tuple[str, int]]]
    traffic: Traffic
    api: ApiProbe
    churn: Churn
    counter: PodCounter
    probes: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        """What does not hold yet of the invariants; empty when all do."""
        try:
            return self._violations()
        except API_ERRORS as error:
            return [f"the API does not answer: {error}"]

    def _violations(self) -> list[str]:
        found: list[str] = []
        for (resource, name), uid in self.objects.items():
            try:
                current = self.client.get(resource, name, self.namespace)["metadata"]["uid"]
            except NotFound:
                found.append(f"{resource.plural}/{name} is gone")
                continue
            if current != uid:
                found.append(f"{resource.plural}/{name} has uid {current}, not {uid}")
        pods = self.client.list(PODS, self.namespace)["items"]
        for name, replicas in (("steady", STEADY_REPLICAS), ("churn", CHURN_REPLICAS)):
            mine = [pod for pod in pods if pod["metadata"].get("labels", {}).get("app") == name and active(pod)]
            ready = sum(pod_ready(pod) for pod in mine)
            if ready != replicas or len(mine) > replicas + MAX_SURGE:
                found.append(f"deployment {name}: {ready} ready of {len(mine)} active pods, wants {replicas}")
            status = self.client.get(DEPLOYMENTS, name, self.namespace).get("status") or {}
            if status.get("readyReplicas") != replicas:
                found.append(f"deployment {name} reports {status.get('readyReplicas')} ready replicas")
        steady = {pod["metadata"]["name"]: containers_of(pod) for pod in pods
                  if pod["metadata"].get("labels", {}).get("app") == "steady" and active(pod)}
        if steady != self.steady_containers:
            found.append(f"steady pods changed: {steady} (were {self.steady_containers})")
        return found

    def objects_checked(self) -> int:
        return len(self.objects) + STEADY_REPLICAS


def start_probe(client: ApiClient, namespace: str, name: str) -> None:
    client.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                         "spec": {"terminationGracePeriodSeconds": 0,
                                  "containers": [{"name": "probe", "image": "busybox", "command": ["sleep", "600"]}]}},
                  namespace)


def probe_running(client: ApiClient, namespace: str, name: str) -> bool:
    try:
        return client.get(PODS, name, namespace).get("status", {}).get("phase") == "Running"
    except API_ERRORS:
        return False


@pytest.fixture(scope="module")
def scenario(cluster: ApiClient) -> Iterator[Scenario]:
    namespace = f"chaos-{uuid.uuid4().hex[:8]}"
    cluster.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        yield _set_up(cluster, namespace)
    finally:
        with contextlib.suppress(NotFound):
            cluster.delete(NAMESPACES, namespace)


def _set_up(cluster: ApiClient, namespace: str) -> Scenario:
    objects: dict[tuple[Resource, str], str] = {}

    def record(resource: Resource, body: dict[str, Any]) -> dict[str, Any]:
        created = cluster.create(resource, body, namespace)
        objects[resource, created["metadata"]["name"]] = created["metadata"]["uid"]
        return created

    record(DEPLOYMENTS, deployment("steady", STEADY_REPLICAS, ["sh", "-c", STEADY_COMMAND]))
    record(DEPLOYMENTS, deployment("churn", CHURN_REPLICAS, ["sleep", "3600"]))
    service = record(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "steady"},
                                "spec": {"selector": {"app": "steady"},
                                         "ports": [{"name": "web", "port": 80, "targetPort": "http"}]}})
    for index in range(SELECTORLESS_SERVICES):
        record(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"external-{index}"},
                          "spec": {"ports": [{"name": "web", "port": 80 + index}]}})
    for index in range(DNS_OBJECTS):
        record(DNS, {"apiVersion": "minik8s.io/v1", "kind": "DNS", "metadata": {"name": f"site-{index}"},
                     "spec": {"host": f"site-{index}.{namespace}.example.com",
                              "paths": [{"path": "/", "serviceName": f"external-{index}", "servicePort": 80 + index}]}})

    def steady_pods() -> list[dict[str, Any]]:
        return [pod for pod in cluster.list(PODS, namespace, label_selector="app=steady")["items"]
                if active(pod) and pod_ready(pod)]

    wait_for(lambda: len(steady_pods()) == STEADY_REPLICAS, 120, what="the steady pods to be ready")
    wait_for(lambda: sum(pod_ready(pod) for pod in cluster.list(PODS, namespace, label_selector="app=churn")["items"])
             == CHURN_REPLICAS, 120, what="the churn pods to be ready")
    url = f"http://{service['spec']['clusterIP']}/"

    def answers() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return all(httpx.get(url, timeout=1).status_code == 200 for _ in range(10))
        return False

    wait_for(answers, 60, what=f"the steady Service to answer on {url} from the host")
    scenario = Scenario(
        client=cluster, namespace=namespace, objects=objects,
        steady_containers={pod["metadata"]["name"]: containers_of(pod) for pod in steady_pods()},
        traffic=Traffic(service["spec"]["clusterIP"]), api=ApiProbe(namespace), churn=Churn(namespace),
        counter=PodCounter(namespace),
    )
    for thread in (scenario.traffic, scenario.api, scenario.churn, scenario.counter):
        thread.start()
    return scenario


@pytest.fixture(scope="module", autouse=True)
def stop_threads(scenario: Scenario) -> Iterator[None]:
    yield
    for thread in (scenario.traffic, scenario.api, scenario.churn, scenario.counter):
        thread.stopping.set()
        thread.join(10)


@pytest.mark.parametrize(("fault", "programs"), FAULTS, ids=[fault for fault, _ in FAULTS])
def test_the_cluster_recovers_from_a_crash(scenario: Scenario, fault: str, programs: tuple[str, ...]) -> None:
    figures = FaultFigures(fault)
    FIGURES.append(figures)
    scenario.churn.running.set()
    time.sleep(3)  # the churn controllers are mid-work when the crash comes
    killed_at = time.monotonic()
    apiserver_before = program_pids()[APISERVER]
    old_pids = kill_programs(programs)
    up_at = wait_restarted(old_pids)
    figures.restart_s = up_at - killed_at
    scenario.churn.running.clear()

    remaining = converge(scenario, up_at + CONVERGENCE_S, f"probe-{len(FIGURES)}")
    converged_at = time.monotonic()
    figures.converge_s = converged_at - up_at if not remaining else None
    figures.served, figures.failed = scenario.traffic.between(killed_at, converged_at)
    figures.objects_checked = scenario.objects_checked()
    figures.max_active = scenario.counter.max_between(killed_at, converged_at)
    figures.api_answers, figures.api_slowest_s = scenario.api.between(killed_at, converged_at)

    problems = [f"not converged {CONVERGENCE_S} s after {fault} was back: {remaining}"] if remaining else []
    if set(programs) <= SERVICE_KEEPS_ANSWERING and figures.failed:
        problems.append(f"{figures.failed} requests to the steady Service failed while only {fault} was down")
    if APISERVER not in programs:
        # Whatever else is down, a running apiserver answers every request: 503 for an etcd gap, never a hang.
        if program_pids()[APISERVER] != apiserver_before:
            problems.append(f"the apiserver restarted while {fault} was down")
        if not set(figures.api_answers) <= {"200", "503"}:
            problems.append(f"the API answered {dict(figures.api_answers)} while {fault} was down")
    figures.verdict = "ok" if not problems else "FAILED"
    assert not problems, "\n".join(problems)


def converge(scenario: Scenario, deadline: float, probe: str) -> list[str]:
    """Wait until every invariant holds and then a new pod runs; what still failed at ``deadline`` if not."""
    remaining = ["not checked"]
    while time.monotonic() < deadline:
        remaining = scenario.violations()
        if not remaining:
            break
        time.sleep(0.5)
    else:
        return remaining
    created = False
    try:
        while time.monotonic() < deadline:
            if not created:
                with contextlib.suppress(*API_ERRORS):
                    start_probe(scenario.client, scenario.namespace, probe)
                    created = True
            elif probe_running(scenario.client, scenario.namespace, probe):
                return []
            time.sleep(0.5)
        return [f"pod {probe} is not Running"]
    finally:
        with contextlib.suppress(*API_ERRORS):
            scenario.client.delete(PODS, probe, scenario.namespace)


def test_the_steady_pods_are_still_ready_and_in_their_endpoints(scenario: Scenario) -> None:
    """Once every crash is over the steady pods are the ones from the start, Ready, and their Service lists them."""
    ips = {pod["status"]["podIP"] for pod in scenario.client.list(PODS, scenario.namespace,
                                                                   label_selector="app=steady")["items"]}
    subsets = scenario.client.get(ENDPOINTS, "steady", scenario.namespace).get("subsets") or []
    assert {address["ip"] for subset in subsets for address in subset.get("addresses") or []} == ips
    for name in scenario.steady_containers:
        assert is_ready(scenario.client, scenario.namespace, name)
