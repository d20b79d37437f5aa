"""Every Docker call the kubelet makes, and the reading of ``docker inspect`` into ``ObservedContainer``.

Only containers labelled with this node's name are ever listed, so the kubelet
never touches containers that other tools (or other kubelets sharing the
daemon) run on the same Docker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.utils import parse_repository_tag

from daemons.kubelet.decisions import ContainerState, ObservedContainer
from daemons.kubelet.spec import (
    KIND_APP,
    LABEL_BACKOFF,
    LABEL_CONTAINER_KIND,
    LABEL_CONTAINER_NAME,
    LABEL_HASH,
    LABEL_NODE,
    LABEL_POD_NAME,
    LABEL_POD_NAMESPACE,
    LABEL_POD_UID,
    LABEL_RESTART_COUNT,
)

log = logging.getLogger(__name__)

DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)
"""What a failed Docker call raises: an API error or a broken connection."""


def parse_docker_time(value: str | None) -> datetime | None:
    """Docker's RFC 3339 nanosecond timestamps as aware datetimes; the zero time is None."""
    if not value or value.startswith("0001-01-01"):
        return None
    text = value.rstrip("Z")
    if "." in text:
        whole, fraction = text.split(".", 1)
        text = f"{whole}.{fraction[:6]}"
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def docker_state(state: Mapping[str, Any]) -> ContainerState:
    """Docker's status folded into created / running / exited; a start that failed counts as exited."""
    status = state.get("Status")
    if status in ("running", "paused", "restarting"):
        return "running"
    if status == "created" and not state.get("Error"):
        return "created"
    return "exited"


def observe(attrs: Mapping[str, Any]) -> ObservedContainer:
    """An ``ObservedContainer`` from one ``docker inspect`` answer."""
    state = attrs.get("State") or {}
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    kind = docker_state(state)
    return ObservedContainer(
        id=attrs["Id"],
        name=labels.get(LABEL_CONTAINER_NAME, ""),
        state=kind,
        kind=labels.get(LABEL_CONTAINER_KIND, KIND_APP),
        pod_uid=labels.get(LABEL_POD_UID, ""),
        pod_namespace=labels.get(LABEL_POD_NAMESPACE, ""),
        pod_name=labels.get(LABEL_POD_NAME, ""),
        restart_count=_int(labels.get(LABEL_RESTART_COUNT)),
        backoff=_int(labels.get(LABEL_BACKOFF)),
        spec_hash=labels.get(LABEL_HASH, ""),
        image=(attrs.get("Config") or {}).get("Image", ""),
        image_id=attrs.get("Image", ""),
        exit_code=_int(state.get("ExitCode"), -1) if kind == "exited" else None,
        oom_killed=bool(state.get("OOMKilled")),
        error=state.get("Error") or "",
        created_at=parse_docker_time(attrs.get("Created")),
        started_at=parse_docker_time(state.get("StartedAt")),
        finished_at=parse_docker_time(state.get("FinishedAt")) if kind == "exited" else None,
        ip_address=((attrs.get("NetworkSettings") or {}).get("IPAddress") or ""),
    )


def image_reference(image: str) -> tuple[str, str]:
    """Repository and tag of an image name: ``latest`` when none, the digest for ``name@sha256:...``."""
    repository, tag = parse_repository_tag(image)
    return repository, tag or "latest"


class DockerRuntime:
    """The kubelet's view of one Docker daemon, limited to the containers of ``node_name``."""

    def __init__(self, base_url: str, node_name: str, timeout: int = 120) -> None:
        self.base_url = base_url
        self.node_name = node_name
        self.client = docker.DockerClient(base_url=base_url, timeout=timeout)
        # Streams (followed logs, events) may stay quiet for long: no read timeout on their connections.
        self._streams = docker.APIClient(base_url=base_url, version=self.client.api.api_version, timeout=None)

    def version(self) -> str:
        return str(self.client.version().get("Version", "unknown"))

    def ping(self) -> bool:
        try:
            return bool(self.client.ping())
        except DOCKER_ERRORS:
            return False

    # --- containers -------------------------------------------------------------------------------

    def _summaries(self, labels: list[str]) -> list[dict[str, Any]]:
        return self.client.api.containers(all=True, filters={"label": [f"{LABEL_NODE}={self.node_name}", *labels]})

    def _list(self, labels: list[str]) -> list[ObservedContainer]:
        found = []
        for summary in self._summaries(labels):
            try:
                found.append(observe(self.client.api.inspect_container(summary["Id"])))
            except docker.errors.NotFound:
                continue  # removed between the listing and the inspection
        return found

    def node_pods(self) -> set[tuple[str, str, str]]:
        """(namespace, name, uid) of every pod that has containers on this node, running or not."""
        pods = set()
        for summary in self._summaries([]):
            labels = summary.get("Labels") or {}
            pods.add((labels.get(LABEL_POD_NAMESPACE, ""), labels.get(LABEL_POD_NAME, ""),
                      labels.get(LABEL_POD_UID, "")))
        return pods

    def pod_containers(self, namespace: str, name: str) -> list[ObservedContainer]:
        """The containers of pod ``namespace/name`` (of any uid: an older pod of the same name included)."""
        return self._list([f"{LABEL_POD_NAMESPACE}={namespace}", f"{LABEL_POD_NAME}={name}"])

    def inspect(self, container_id: str) -> ObservedContainer:
        return observe(self.client.api.inspect_container(container_id))

    def create(self, args: Mapping[str, Any]) -> str:
        container = self.client.containers.create(**args)
        return str(container.id)

    def start(self, container_id: str) -> None:
        self.client.api.start(container_id)

    def signal(self, container_id: str, signal: str) -> None:
        try:
            self.client.api.kill(container_id, signal=signal)
        except docker.errors.APIError as error:
            if error.status_code not in (404, 409):  # gone, or not running
                raise

    def wait(self, container_id: str, timeout: float) -> bool:
        """Whether the container stopped within ``timeout`` seconds."""
        if timeout <= 0:
            return not self.is_running(container_id)
        try:
            self.client.api.wait(container_id, timeout=timeout)
            return True
        except docker.errors.NotFound:
            return True
        except requests.exceptions.RequestException:
            return not self.is_running(container_id)

    def is_running(self, container_id: str) -> bool:
        try:
            return self.inspect(container_id).state == "running"
        except docker.errors.NotFound:
            return False

    def stop(self, container_id: str, grace_seconds: float) -> None:
        """SIGTERM, then SIGKILL after ``grace_seconds`` (docker stop)."""
        try:
            self.client.api.stop(container_id, timeout=max(int(grace_seconds), 0))
        except docker.errors.NotFound:
            return

    def remove(self, container_id: str) -> None:
        try:
            self.client.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as error:
            if error.status_code != 409:  # removal already in progress
                raise

    # --- images -----------------------------------------------------------------------------------

    def image_present(self, image: str) -> bool:
        try:
            self.client.images.get(image)
            return True
        except docker.errors.ImageNotFound:
            return False

    def pull(self, image: str) -> None:
        repository, tag = image_reference(image)
        self.client.images.pull(repository, tag=tag)

    # --- exec and logs ----------------------------------------------------------------------------

    def exec(self, container_id: str, command: list[str], timeout: float | None = None) -> tuple[int, bytes, bytes]:
        """Run ``command`` in the container; its exit code, stdout and stderr.

        With ``timeout``, a dedicated connection gives up after that many seconds
        (``requests`` raises), which bounds a probe that hangs.
        """
        api = self.client.api if timeout is None else docker.APIClient(
            base_url=self.base_url, version=self.client.api.api_version, timeout=timeout)
        try:
            exec_id = api.exec_create(container_id, command)["Id"]
            stdout, stderr = api.exec_start(exec_id, demux=True)
            code = api.exec_inspect(exec_id).get("ExitCode")
        finally:
            if api is not self.client.api:
                api.close()
        return (code if code is not None else -1), stdout or b"", stderr or b""

    def logs(self, container_id: str, *, tail: int | None = None, timestamps: bool = False,
             since: datetime | None = None) -> bytes:
        """The container's output so far, stdout and stderr interleaved."""
        return self.client.api.logs(container_id, timestamps=timestamps, tail="all" if tail is None else tail,
                                    since=since)

    def follow_logs(self, container_id: str, *, tail: int | None = None, timestamps: bool = False,
                    since: datetime | None = None) -> Iterator[bytes]:
        """The output as it comes, until the container stops; errors (no such container) raise here, at once."""
        return self._streams.logs(container_id, stream=True, follow=True, timestamps=timestamps,
                                  tail="all" if tail is None else tail, since=since)

    def events(self, since: datetime | None = None) -> Iterator[dict[str, Any]]:
        """Container lifecycle events of this node's containers, as Docker streams them."""
        return self._streams.events(since=since, decode=True, filters={
            "type": "container", "label": [f"{LABEL_NODE}={self.node_name}"],
            "event": ["start", "die", "oom", "destroy"]})
