"""minik8s-kubelet: registers this node and runs the pods the scheduler binds to it, in Docker.

Threads: the pod informer (HTTP watch or the node's RabbitMQ queue, plus
resync), the pod workers (one sync at a time per pod), the node heartbeat, the
probe scheduler and its pool, a follower of Docker's container events (a
container that dies is noticed at once), periodic housekeeping, and the HTTPS
API (logs, exec, and the containers' metrics for Prometheus). SIGTERM or
SIGINT stops the kubelet and leaves the pods running; the next kubelet adopts
them. With --hollow the process simulates --hollow-nodes nodes instead and
touches no Docker (daemons/kubelet/hollow.py).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from daemons.api.client import ApiClient
from daemons.api.errors import APIError, ConnectionFailed
from daemons.api.resources import by_kind
from daemons.kubelet.cadvisor import ContainerMetrics
from daemons.kubelet.decisions import PodContainers
from daemons.kubelet.events import BackgroundRecorder
from daemons.kubelet.hollow import HollowKubelet
from daemons.kubelet.node import NodeReporter
from daemons.kubelet.pods import PodSyncer, docker_message
from daemons.kubelet.probes import ProbeKind, ProbeManager
from daemons.kubelet.runtime import DOCKER_ERRORS, DockerRuntime
from daemons.kubelet.server import KubeletServer, NoPrevious, NotOnNode, ensure_certificate, load_tokens
from daemons.kubelet.settings import KubeletSettings, NodeConfig, load_node_config, primary_ipv4
from daemons.kubelet.spec import LABEL_POD_NAME, LABEL_POD_NAMESPACE
from daemons.kubelet.status import reported_ready
from daemons.machinery.controller import Controller, TemporaryError
from daemons.machinery.informer import Informer
from daemons.machinery.log import setup_logging
from daemons.machinery.settings import parse_settings

log = logging.getLogger(__name__)

PODS = by_kind("v1", "Pod")
DOCKER_RETRY_SECONDS = 2.0


class Kubelet:
    """All of the kubelet's parts, wired together."""

    def __init__(self, settings: KubeletSettings, config: NodeConfig, runtime: DockerRuntime) -> None:
        assert PODS is not None
        self.settings = settings
        self.config = config
        self.node_name = config.name
        self.address = config.address or primary_ipv4()
        self.runtime = runtime
        self.client = ApiClient.from_config(settings.kubeconfig, user_agent=f"minik8s-kubelet/{self.node_name}")
        self.recorder = BackgroundRecorder(self.client, "kubelet", self.node_name)
        self.informer = Informer(
            self.client, PODS, field_selector=f"spec.nodeName={self.node_name}", amqp_url=settings.amqp_url,
            queue_name=f"kubelet.{self.node_name}.pods", resync_seconds=settings.resync_seconds)
        self.controller = Controller(f"kubelet-{self.node_name}", self._sync, workers=settings.workers,
                                     base_delay=1.0, max_delay=60.0)
        self.probes = ProbeManager(runtime.exec, self._on_probe_result,
                                   ready_before=lambda key, container_id: reported_ready(
                                       self.informer.store.get_by_key(key), container_id))
        self.syncer = PodSyncer(
            client=self.client, runtime=runtime, recorder=self.recorder, probes=self.probes,
            pods=self.informer.store, node_name=self.node_name, host_ip=self.address, root_dir=settings.root_dir,
            pod_infra_image=settings.pod_infra_image, cluster_dns=settings.cluster_dns,
            cluster_domain=settings.cluster_domain, requeue=self.controller.enqueue_after)
        self.informer.add_handlers(on_add=self.controller.enqueue_object,
                                   on_update=lambda _old, new: self.controller.enqueue_object(new),
                                   on_delete=self.controller.enqueue_object)
        self.reporter = NodeReporter(self.client, config, self.address, settings.port, settings.status_interval,
                                     self._runtime_version, pod_cidr_file=settings.pod_cidr_file,
                                     lease_duration=settings.node_lease_duration_seconds,
                                     report_frequency=settings.node_status_report_frequency)
        cert, key = settings.tls_cert_file, settings.tls_private_key_file
        if not cert or not key:
            cert, key = (str(path) for path in ensure_certificate(Path(settings.root_dir, "pki"), self.node_name,
                                                                  [self.address]))
        self.metrics = ContainerMetrics(runtime)
        self.server = KubeletServer(runtime, self.locate, load_tokens(settings.authentication_token_file),
                                    settings.bind_address, settings.port, cert, key, self.metrics.scrape)
        self._stopping = threading.Event()

    # --- glue ---------------------------------------------------------------------------------------

    def _sync(self, key: str) -> None:
        """One pod's sync; Docker or the apiserver failing is a retry, not a traceback."""
        try:
            self.syncer.sync(key)
        except DOCKER_ERRORS as error:
            raise TemporaryError(f"container runtime: {docker_message(error)}") from None
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"apiserver: {error}") from None

    def _on_probe_result(self, key: str, container: str, kind: ProbeKind, ok: bool, message: str,
                         changed: bool) -> None:
        self.syncer.on_probe_result(key, container, kind, ok, message, changed)

    def _runtime_version(self) -> str | None:
        try:
            return self.runtime.version()
        except DOCKER_ERRORS:
            return None

    def locate(self, namespace: str, pod_name: str, container: str, previous: bool) -> str:
        """The Docker id of a pod's container (or of its previous instance), for logs and exec."""
        pod = self.informer.store.get(namespace, pod_name)
        if pod is None:
            raise NotOnNode(f'pods "{pod_name}" not found on node {self.node_name}')
        names = [c["name"] for c in [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]]
        if container not in names:
            raise NotOnNode(f"container {container} is not valid for pod {pod_name}")
        group = PodContainers.of([c for c in self.runtime.pod_containers(namespace, pod_name)
                                  if c.pod_uid == pod["metadata"].get("uid")])
        found = group.previous(container) if previous else group.newest(container)
        if found is None and previous:
            raise NoPrevious(f'previous terminated container "{container}" in pod "{pod_name}" not found')
        if found is None:
            raise NotOnNode(f'container "{container}" in pod "{pod_name}" is waiting to start')
        return found.id

    # --- lifecycle ----------------------------------------------------------------------------------

    def run(self) -> None:
        """Start everything and block until ``stop``."""
        Path(self.settings.root_dir, "pods").mkdir(parents=True, exist_ok=True)
        self.server.start()
        self.reporter.start()
        self.probes.start()
        self.informer.start()
        self.controller.start()
        log.info("kubelet for node %s (%s) started", self.node_name, self.address)
        while not self.informer.wait_synced(1.0):
            if self._stopping.is_set():
                return
        threading.Thread(target=self._follow_docker_events, name="docker-events", daemon=True).start()
        threading.Thread(target=self._housekeeping_loop, name="housekeeping", daemon=True).start()
        self._stopping.wait()

    def stop(self) -> None:
        self._stopping.set()
        self.controller.stop(5.0)
        self.informer.stop(1.0)
        self.reporter.stop()
        self.probes.stop()
        self.server.stop()
        log.info("kubelet for node %s stopped; its pods keep running", self.node_name)

    def _follow_docker_events(self) -> None:
        """Sync a pod as soon as one of its containers starts, dies or goes."""
        since = datetime.now(UTC)
        while not self._stopping.is_set():
            try:
                for event in self.runtime.events(since):
                    attributes = (event.get("Actor") or {}).get("Attributes") or {}
                    namespace, name = attributes.get(LABEL_POD_NAMESPACE), attributes.get(LABEL_POD_NAME)
                    if namespace and name:
                        self.controller.enqueue(f"{namespace}/{name}")
                    if event.get("time"):
                        since = datetime.fromtimestamp(int(event["time"]), UTC)
            except DOCKER_ERRORS as error:
                log.warning("docker events interrupted (%s); following again", error)
            self._stopping.wait(DOCKER_RETRY_SECONDS)

    def _housekeeping_loop(self) -> None:
        interval = self.settings.resync_seconds or 30.0
        while not self._stopping.is_set():
            try:
                self.syncer.housekeeping()
            except DOCKER_ERRORS as error:
                log.warning("housekeeping failed: %s", error)
            except Exception:
                log.exception("housekeeping failed")
            self._stopping.wait(interval)


def connect_docker(url: str, node_name: str, stopping: threading.Event) -> DockerRuntime | None:
    """The Docker runtime, once the daemon answers (it may start after the kubelet)."""
    while not stopping.is_set():
        try:
            return DockerRuntime(url, node_name)
        except DOCKER_ERRORS as error:
            log.warning("Docker at %s does not answer (%s); retrying", url, error)
            stopping.wait(DOCKER_RETRY_SECONDS)
    return None


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(KubeletSettings, argv, prog="minik8s-kubelet")
    setup_logging(settings.log_level)
    try:
        config = load_node_config(settings.node_config)
    except ValueError as error:
        print(f"minik8s-kubelet: {error}", file=sys.stderr)
        sys.exit(2)
    stopping = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    kubelet: Kubelet | HollowKubelet
    if settings.hollow:
        kubelet = HollowKubelet(settings, config)
    else:
        runtime = connect_docker(settings.docker_url, config.name, stopping)
        if runtime is None:
            return
        kubelet = Kubelet(settings, config, runtime)
    runner = threading.Thread(target=kubelet.run, name="kubelet", daemon=True)
    runner.start()
    while not stopping.wait(1.0):
        if not runner.is_alive():
            log.error("the kubelet stopped unexpectedly")
            sys.exit(1)
    kubelet.stop()


if __name__ == "__main__":
    main()
