"""The pod worker: one idempotent ``sync(key)`` that makes Docker match a pod and reports what it sees.

Each sync reads the pod from the informer cache and its containers from
Docker (by label), decides per container what to do (``decisions.next_action``),
does it, observes again and writes the status if it changed. Nothing is kept
between syncs that Docker or the API does not hold, except image-pull back-off
and the last status written; so a kubelet restart adopts running containers
as they are.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemons.api.client import ApiClient
from daemons.api.errors import APIError, ConnectionFailed, NotFound
from daemons.api.resources import by_kind, require, resolve
from daemons.kubelet import configfiles
from daemons.kubelet import spec as podspec
from daemons.kubelet.configfiles import ConfigKind, MissingConfig
from daemons.kubelet.decisions import (
    Action,
    InitProgress,
    ObservedContainer,
    PodContainers,
    backoff_delay,
    init_progress,
    next_action,
)
from daemons.kubelet.probes import ProbeKind, ProbeManager
from daemons.kubelet.runtime import DOCKER_ERRORS, DockerRuntime
from daemons.kubelet.status import TERMINAL_PHASES, build_pod_status, container_status, status_patch
from daemons.machinery.controller import TemporaryError
from daemons.machinery.events import EventRecorder
from daemons.machinery.informer import Store
from daemons.machinery.keys import key_of, resource_version, split_key

log = logging.getLogger(__name__)

PODS = by_kind("v1", "Pod")
SERVICES = require("v1", "Service")
CONFIG_RESOURCES: dict[ConfigKind, str] = {"ConfigMap": "configmaps", "Secret": "secrets"}
ORPHAN_GRACE_SECONDS = 2
CREATE_RETRY_SECONDS = 10.0
ORPHAN_DIR_AGE_SECONDS = 60.0

Waiting = tuple[str, str]


def docker_message(error: Exception) -> str:
    """The daemon's own words for a failed call, without the HTTP request around them."""
    explanation = getattr(error, "explanation", None)
    return str(explanation or error)


def field_path(pod: Mapping[str, Any], container_name: str) -> str:
    """The event's ``fieldPath`` for a container: ``spec.initContainers{x}`` or ``spec.containers{x}``."""
    inits = {container["name"] for container in (pod.get("spec") or {}).get("initContainers") or []}
    return f"spec.{'initContainers' if container_name in inits else 'containers'}{{{container_name}}}"


class PodSyncer:
    """Converges the pods bound to this node; ``sync`` is the controller's per-key function."""

    def __init__(
        self,
        *,
        client: ApiClient,
        runtime: DockerRuntime,
        recorder: EventRecorder,
        probes: ProbeManager,
        pods: Store,
        node_name: str,
        host_ip: str,
        root_dir: str,
        pod_infra_image: str,
        cluster_dns: list[str],
        cluster_domain: str | None,
        requeue: Callable[[str, float], None],
    ) -> None:
        self.client = client
        self.runtime = runtime
        self.recorder = recorder
        self.probes = probes
        self.pods = pods
        self.node_name = node_name
        self.host_ip = host_ip
        self.root_dir = root_dir
        self.pod_infra_image = pod_infra_image
        self.cluster_dns = cluster_dns
        self.cluster_domain = cluster_domain
        self.requeue = requeue
        self._lock = threading.Lock()
        self._pull_failures: dict[tuple[str, str], tuple[int, float, str]] = {}  # (uid, container) -> n, when, why
        self._written: dict[str, dict[str, Any]] = {}  # key -> the pod as our last status write returned it

    # --- the sync -----------------------------------------------------------------------------------

    def sync(self, key: str) -> None:
        namespace, name = split_key(key)
        assert namespace is not None
        pod = self._latest(key)
        uid = (pod or {}).get("metadata", {}).get("uid")
        containers = self.runtime.pod_containers(namespace, name)
        strays = [c for c in containers if c.pod_uid != uid]
        if strays:
            log.info("%s: removing %d containers of a pod that is gone", key, len(strays))
            self._remove(strays, ORPHAN_GRACE_SECONDS)
        if pod is None:
            self._forget(key)
            return
        mine = [c for c in containers if c.pod_uid == uid]
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(key, pod, mine)
        elif (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            self._stop(mine, ORPHAN_GRACE_SECONDS)
            self.probes.retain(key, set())
        else:
            self._converge(key, pod, PodContainers.of(mine))

    def _latest(self, key: str) -> dict[str, Any] | None:
        """The cached pod, or the answer to our own status write when the cache has not caught up with it."""
        cached = self.pods.get_by_key(key)
        with self._lock:
            written = self._written.get(key)
        if cached is None:
            with self._lock:
                self._written.pop(key, None)
            return None
        if written and written["metadata"].get("uid") == cached["metadata"].get("uid") \
                and resource_version(written) > resource_version(cached):
            return written
        return cached

    def _forget(self, key: str) -> None:
        self.probes.retain(key, set())
        with self._lock:
            self._written.pop(key, None)

    # --- deletion -----------------------------------------------------------------------------------

    def _terminate(self, key: str, pod: dict[str, Any], containers: list[ObservedContainer]) -> None:
        """Graceful deletion: SIGTERM, up to the grace period, SIGKILL; clean up; then let the API forget the pod."""
        metadata = pod["metadata"]
        grace = metadata.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        for container in containers:
            if container.kind == podspec.KIND_APP and container.state == "running":
                self.recorder.record(pod, "Normal", "Killing", f"Stopping container {container.name}",
                                     field_path(pod, container.name))
        self.probes.retain(key, set())
        self._remove(containers, float(grace))
        self._remove_pod_dir(str(metadata["uid"]))
        assert PODS is not None
        try:
            self.client.delete(PODS, metadata["name"], metadata["namespace"], grace_period_seconds=0)
            log.info("%s: stopped and deleted", key)
        except NotFound:
            pass
        self._forget(key)

    def _stop(self, containers: list[ObservedContainer], grace: float) -> None:
        """Stop the running ones together: SIGTERM to all, then SIGKILL to whatever outlives ``grace``."""
        running = [c for c in containers if c.state == "running"]
        for container in running:
            self.runtime.signal(container.id, "SIGTERM")
        deadline = time.monotonic() + grace
        for container in running:
            if not self.runtime.wait(container.id, deadline - time.monotonic()):
                self.runtime.signal(container.id, "SIGKILL")
                self.runtime.wait(container.id, 10)

    def _remove(self, containers: list[ObservedContainer], grace: float) -> None:
        self._stop([c for c in containers if c.kind == podspec.KIND_APP], grace)
        for container in containers:
            self.runtime.remove(container.id)
        for uid in {c.pod_uid for c in containers if c.pod_uid}:
            self._remove_pod_dir(uid)

    def _remove_pod_dir(self, uid: str) -> None:
        path = Path(self.root_dir, "pods", uid)
        if path.is_dir():
            configfiles.unmount_under(str(path))  # the secret volumes' tmpfs
            shutil.rmtree(path, ignore_errors=True)

    # --- convergence --------------------------------------------------------------------------------

    def _decide(self, pod: dict[str, Any], group: PodContainers,
                now: datetime) -> tuple[dict[str, Action], InitProgress]:
        """Actions for the init container that is due, or, once the pod is initialized, for every app container."""
        policy = pod["spec"].get("restartPolicy", "Always")
        init = init_progress(pod["spec"].get("initContainers") or [], group, policy, now,
                             [container["name"] for container in pod["spec"]["containers"]])
        actions = dict(init.actions)
        if init.initialized:
            for container in pod["spec"]["containers"]:
                newest = group.newest(container["name"])
                failed = newest is not None and newest.state == "running" and self.probes.liveness_failed(newest.id)
                actions[container["name"]] = next_action(container, newest, policy, now, liveness_failed=failed)
        return actions, init

    def _converge(self, key: str, pod: dict[str, Any], group: PodContainers) -> None:
        now = datetime.now(UTC)
        actions, init = self._decide(pod, group, now)
        sandbox = group.sandbox
        if any(action.kind != "done" for action in actions.values()) and (sandbox is None or
                                                                           sandbox.state != "running"):
            sandbox = self._new_sandbox(key, pod, group)
            group = self._observe(pod)
            actions, init = self._decide(pod, group, now)
        pod_ip = self._pod_ip(pod, sandbox)
        waiting: dict[str, Waiting] = {}
        delays: list[float] = []
        creating = any(action.kind in ("create", "restart", "replace") for action in actions.values())
        refresh = self._config_volumes(pod) and sandbox is not None and sandbox.state == "running"
        objects: configfiles.ConfigObjects = {}
        volumes: dict[str, str] = {}
        volume_error: Waiting | None = None
        if creating or refresh:
            try:
                objects = self._config_objects(pod)
                volumes, missing = self._prepare_volumes(pod, objects, now)
            except podspec.ConfigError as error:
                volume_error = ("CreateContainerConfigError", str(error))
            else:
                if missing:
                    volume_error = ("ContainerCreating", missing)
        acted = False
        for container in configfiles.all_containers(pod):
            action = actions.get(container["name"])
            if action is None or action.kind in ("keep", "done"):
                continue
            acted = True
            if action.kind in ("create", "restart", "replace") and volume_error is not None:
                reason, message = volume_error
                if reason == "CreateContainerConfigError":
                    self._failed(pod, container, reason, message)
                waiting[container["name"]] = volume_error
                delays.append(CREATE_RETRY_SECONDS)
                continue
            assert sandbox is not None
            reason = self._act(key, pod, container, action, group, sandbox, pod_ip, volumes, objects, delays)
            if reason is not None:
                waiting[container["name"]] = reason
        if acted:
            group = self._observe(pod)
        self._report(key, pod, group, sandbox, pod_ip, waiting, now, init)
        if delays:
            self.requeue(key, max(min(delays), 0.0))

    @staticmethod
    def _config_volumes(pod: dict[str, Any]) -> bool:
        return any(configfiles.volume_kind(volume) is not None for volume in pod["spec"].get("volumes") or [])

    def _config_objects(self, pod: dict[str, Any]) -> dict[configfiles.ObjectRef, dict[str, bytes] | None]:
        """The data of every ConfigMap and Secret the pod names, read now (None for those that do not exist)."""
        namespace = pod["metadata"]["namespace"]
        objects: dict[configfiles.ObjectRef, dict[str, bytes] | None] = {}
        for kind, name in sorted(configfiles.referenced_objects(pod)):
            resource = resolve(CONFIG_RESOURCES[kind])
            if resource is None:
                raise podspec.ConfigError(f"this cluster does not serve {CONFIG_RESOURCES[kind]}")
            try:
                found = self.client.get(resource, name, namespace)
            except NotFound:
                objects[(kind, name)] = None
                continue
            objects[(kind, name)] = configfiles.object_data(kind, found)
        return objects

    def _observe(self, pod: dict[str, Any]) -> PodContainers:
        metadata = pod["metadata"]
        found = self.runtime.pod_containers(metadata["namespace"], metadata["name"])
        return PodContainers.of([c for c in found if c.pod_uid == metadata["uid"]])

    def _pod_ip(self, pod: dict[str, Any], sandbox: ObservedContainer | None) -> str:
        if (pod.get("spec") or {}).get("hostNetwork"):
            return self.host_ip
        if sandbox is not None and sandbox.state == "running" and sandbox.ip_address:
            return sandbox.ip_address
        return str((pod.get("status") or {}).get("podIP") or "")

    def _new_sandbox(self, key: str, pod: dict[str, Any], group: PodContainers) -> ObservedContainer:
        """A fresh pause container; app containers left in the old sandbox's namespaces are stopped first."""
        if group.pause:
            self.recorder.record(pod, "Normal", "SandboxChanged", "Pod sandbox changed, it will be killed and "
                                 "re-created.")
            stranded = [c for found in group.apps.values() for c in found if c.state == "running"]
            self._stop(stranded, float(pod["spec"].get("terminationGracePeriodSeconds", 30)))
            for pause in group.pause:
                self.runtime.remove(pause.id)
        try:
            if not self.runtime.image_present(self.pod_infra_image):
                self.runtime.pull(self.pod_infra_image)
            args = podspec.pause_create_args(pod, self.pod_infra_image, self.node_name, self.cluster_dns,
                                             self.cluster_domain)
            pause_id = self.runtime.create(args)
            self.runtime.start(pause_id)
        except DOCKER_ERRORS as error:
            message = f"Failed to create pod sandbox: {docker_message(error)}"
            self.recorder.record(pod, "Warning", "FailedCreatePodSandBox", message)
            raise TemporaryError(f"{key}: {message}") from None
        log.info("%s: started sandbox %s", key, pause_id[:12])
        return self.runtime.inspect(pause_id)

    def _prepare_volumes(self, pod: dict[str, Any], objects: configfiles.ConfigObjects,
                         now: datetime) -> tuple[dict[str, str], str]:
        """Create what the volumes need on the host and (re)write the configMap and secret files.

        Returns the host paths by volume name and, when a ConfigMap, Secret or key
        that a volume needs is missing, why (the pod waits for it, as upstream).
        """
        fs_group = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
        sources = podspec.volume_sources(pod, self.root_dir)
        volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
        missing = ""
        try:
            for source in sources.values():
                if source.config is not None:
                    problem = self._write_config_volume(pod, source, volumes[source.name], objects, now)
                    missing = missing or problem
                elif source.create == "directory":
                    os.makedirs(source.host_path, exist_ok=True)
                elif source.create == "file":
                    os.makedirs(os.path.dirname(source.host_path), exist_ok=True)
                    Path(source.host_path).touch(exist_ok=True)
                if source.empty_dir:
                    if fs_group is not None:
                        os.chown(source.host_path, -1, int(fs_group))
                    os.chmod(source.host_path, 0o2777 if fs_group is not None else 0o777)
        except OSError as error:
            raise podspec.ConfigError(f"cannot prepare volumes: {error}") from None
        return {name: source.host_path for name, source in sources.items()}, missing

    def _write_config_volume(self, pod: dict[str, Any], source: podspec.VolumeSource, volume: Mapping[str, Any],
                             objects: configfiles.ConfigObjects, now: datetime) -> str:
        """Write one configMap or secret volume (a secret's on a tmpfs); why not, when something is missing."""
        found = configfiles.volume_kind(volume)
        assert found is not None and source.config is not None
        kind, spec = found
        try:
            files = configfiles.projection(kind, spec, objects.get((kind, configfiles.source_name(kind, spec))))
        except MissingConfig as error:
            message = f'MountVolume.SetUp failed for volume "{source.name}" : {error}'
            self.recorder.record(pod, "Warning", "FailedMount", message)
            return message
        except configfiles.BadPath as error:
            raise podspec.ConfigError(f"volume {source.name!r}: {error}") from None
        if kind == "Secret":
            configfiles.ensure_tmpfs(source.host_path)
        if configfiles.write_projection(source.host_path, files, now):
            log.info("%s/%s: wrote %s volume %s (%d files)", pod["metadata"]["namespace"], pod["metadata"]["name"],
                     kind, source.name, len(files))
        return ""

    def _failed(self, pod: dict[str, Any], container: Mapping[str, Any], reason: str, message: str) -> Waiting:
        self.recorder.record(pod, "Warning", "Failed", f"Error: {message}", field_path(pod, container["name"]))
        return reason, message

    def _act(self, key: str, pod: dict[str, Any], container: Mapping[str, Any], action: Action, group: PodContainers,
             sandbox: ObservedContainer, pod_ip: str, volumes: dict[str, str], objects: configfiles.ConfigObjects,
             delays: list[float]) -> Waiting | None:
        """Carry out one container's action; the waiting reason and message if it cannot run now."""
        name = container["name"]
        metadata = pod["metadata"]
        newest = group.newest(name)
        where = field_path(pod, name)
        grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        if action.kind == "wait":
            pod_ref = f"{metadata['name']}_{metadata['namespace']}({metadata['uid']})"
            self.recorder.record(pod, "Warning", "BackOff", f"Back-off restarting failed container {name} in pod "
                                 f"{pod_ref}", where)
            delays.append(action.delay)
            return "CrashLoopBackOff", (f"back-off {backoff_delay(action.backoff):.0f}s restarting failed "
                                        f"container={name} pod={pod_ref}")
        if action.kind == "kill":
            assert newest is not None
            self.recorder.record(pod, "Normal", "Killing", f"Container {name} failed liveness probe, will be "
                                 "restarted", where)
            log.info("%s: killing container %s: %s", key, name, action.reason)
            self._stop([newest], grace)
            delays.append(0.0)
            return None
        if action.kind == "start":
            assert newest is not None
            return self._start(key, pod, container, newest.id)
        if action.kind == "replace":
            assert newest is not None
            self.recorder.record(pod, "Normal", "Killing", f"Container {name} definition changed, will be "
                                 "restarted", where)
            self._stop([newest], grace)
        waiting = self._ensure_image(pod, container, delays)
        if waiting is not None:
            return waiting
        for stale in (group.apps.get(name) or ())[1:]:
            self.runtime.remove(stale.id)  # keep only the newest dead instance, for lastState and previous logs
        try:
            args = podspec.container_create_args(
                pod, container, sandbox.id, volumes, node_name=self.node_name, restart_count=action.restart_count,
                backoff=action.backoff, pod_ip=pod_ip, host_ip=self.host_ip, services=self._service_environment(pod),
                objects=objects)
        except podspec.ConfigError as error:
            delays.append(CREATE_RETRY_SECONDS)
            return self._failed(pod, container, "CreateContainerConfigError", str(error))
        try:
            container_id = self.runtime.create(args)
        except DOCKER_ERRORS as error:
            delays.append(CREATE_RETRY_SECONDS)
            return self._failed(pod, container, "CreateContainerError", docker_message(error))
        self.recorder.record(pod, "Normal", "Created", f"Created container {name}", where)
        return self._start(key, pod, container, container_id)

    def _service_environment(self, pod: dict[str, Any]) -> dict[str, str]:
        """The Service variables of a container about to be created, read from the API at that moment."""
        namespaces = {"default", pod["metadata"]["namespace"]}
        try:
            services = [service for namespace in sorted(namespaces)
                        for service in self.client.list(SERVICES, namespace)["items"]]
        except (APIError, ConnectionFailed) as error:
            raise podspec.ConfigError(f"cannot list the services for the environment: {error}") from None
        return podspec.service_environment(pod, services)

    def _start(self, key: str, pod: dict[str, Any], container: Mapping[str, Any], container_id: str) -> Waiting | None:
        name = container["name"]
        try:
            self.runtime.start(container_id)
        except DOCKER_ERRORS as error:
            # Docker keeps the container with the error; the next sync sees it exited and backs off.
            self.recorder.record(pod, "Warning", "Failed", f"Error: {docker_message(error)}", field_path(pod, name))
            log.info("%s: container %s did not start: %s", key, name, docker_message(error))
            return None
        self.recorder.record(pod, "Normal", "Started", f"Started container {name}", field_path(pod, name))
        log.info("%s: started container %s (%s)", key, name, container_id[:12])
        return None

    def _ensure_image(self, pod: dict[str, Any], container: Mapping[str, Any], delays: list[float]) -> Waiting | None:
        """Pull the image when it is not on the node, with back-off between failed pulls."""
        image, name = container["image"], container["name"]
        where = field_path(pod, name)
        slot = (str(pod["metadata"]["uid"]), name)
        if container.get("imagePullPolicy") != "Always" and self.runtime.image_present(image):
            with self._lock:
                self._pull_failures.pop(slot, None)
            self.recorder.record(pod, "Normal", "Pulled", f'Container image "{image}" already present on machine',
                                 where)
            return None
        if container.get("imagePullPolicy") == "Never":
            message = f'Container image "{image}" is not present with pull policy of Never'
            delays.append(CREATE_RETRY_SECONDS)
            return self._failed(pod, container, "ErrImageNeverPull", message)
        with self._lock:
            failures, last, error = self._pull_failures.get(slot, (0, 0.0, ""))
        remaining = backoff_delay(failures) - (time.monotonic() - last)
        if failures and remaining > 0:
            self.recorder.record(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"', where)
            delays.append(remaining)
            return "ImagePullBackOff", f'Back-off pulling image "{image}": ErrImagePull: {error}'
        self.recorder.record(pod, "Normal", "Pulling", f'Pulling image "{image}"', where)
        started = time.monotonic()
        try:
            self.runtime.pull(image)
        except DOCKER_ERRORS as failure:
            message = f'Failed to pull image "{image}": {docker_message(failure)}'
            with self._lock:
                self._pull_failures[slot] = (failures + 1, time.monotonic(), message)
            self.recorder.record(pod, "Warning", "Failed", message, where)
            delays.append(1.0)  # soon enough to show ImagePullBackOff while the back-off runs
            return self._failed(pod, container, "ErrImagePull", message)
        with self._lock:
            self._pull_failures.pop(slot, None)
        self.recorder.record(pod, "Normal", "Pulled", f'Successfully pulled image "{image}" in '
                             f"{time.monotonic() - started:.3f}s", where)
        return None

    # --- status -------------------------------------------------------------------------------------

    def _report(self, key: str, pod: dict[str, Any], group: PodContainers, sandbox: ObservedContainer | None,
                pod_ip: str, waiting: dict[str, Waiting], now: datetime, init: InitProgress) -> None:
        """Write the status if it changed; keep probing the running containers; end a pod that finished."""
        init_statuses = []
        for container in pod["spec"].get("initContainers") or []:
            newest = group.newest(container["name"])
            done = newest is not None and newest.state == "exited" and newest.exit_code == 0
            init_statuses.append(container_status(
                container, newest, group.previous(container["name"]), ready=done,
                waiting=waiting.get(container["name"]) or (None if newest else ("PodInitializing", ""))))
        statuses = []
        running: set[str] = set()
        for container in pod["spec"]["containers"]:
            newest = group.newest(container["name"])
            ready = False
            if newest is not None and newest.state == "running":
                running.add(newest.id)
                self.probes.track(key, newest.id, container, pod_ip)
                verdict = self.probes.ready(newest.id)
                ready = verdict is None or verdict
            held = None if init.initialized else ("PodInitializing", "")
            statuses.append(container_status(container, newest, group.previous(container["name"]),
                                             waiting=waiting.get(container["name"]) or held, ready=ready))
        self.probes.retain(key, running)
        status = build_pod_status(pod, statuses, host_ip=self.host_ip, pod_ip=pod_ip, now=now,
                                  init_statuses=init_statuses, initialized=init.initialized)
        patch = status_patch(pod.get("status"), status)
        if patch is not None:
            metadata = pod["metadata"]
            assert PODS is not None
            try:
                written = self.client.patch(PODS, metadata["name"], {"status": patch}, metadata["namespace"],
                                            subresource="status")
            except NotFound:
                return  # deleted meanwhile; its DELETED event brings the key back
            with self._lock:
                self._written[key] = written
            log.info("%s: status %s%s", key, status["phase"],
                     "".join(f", {name} {reason}" for name, (reason, _) in sorted(waiting.items())))
        if status["phase"] in TERMINAL_PHASES and sandbox is not None and sandbox.state == "running":
            self.runtime.stop(sandbox.id, ORPHAN_GRACE_SECONDS)
            log.info("%s: pod finished %s; sandbox stopped", key, status["phase"])

    # --- probes and housekeeping --------------------------------------------------------------------

    def on_probe_result(self, key: str, container_name: str, kind: ProbeKind, ok: bool, message: str,
                        changed: bool) -> None:
        """Record a failed probe as an Unhealthy event; sync the pod when the verdict flipped."""
        if not ok:
            pod = self.pods.get_by_key(key)
            if pod is not None:
                self.recorder.record(pod, "Warning", "Unhealthy", f"{kind.capitalize()} probe failed: {message}",
                                     field_path(pod, container_name))
        if changed:
            self.requeue(key, 0.0)

    def housekeeping(self) -> None:
        """Queue the pods whose containers outlived them, and remove pod folders nothing refers to.

        Call it only once the informer has synced, or every container would look orphaned.
        """
        with_containers = self.runtime.node_pods()
        pods = {key_of(pod): str(pod["metadata"].get("uid")) for pod in self.pods.list()}
        for namespace, name, uid in with_containers:
            if pods.get(f"{namespace}/{name}") != uid:
                self.requeue(f"{namespace}/{name}", 0.0)
        known = set(pods.values()) | {uid for _, _, uid in with_containers}
        folder = Path(self.root_dir, "pods")
        if not folder.is_dir():
            return
        for entry in folder.iterdir():
            try:
                stale = entry.name not in known and time.time() - entry.stat().st_mtime > ORPHAN_DIR_AGE_SECONDS
            except OSError:
                continue
            if stale:
                log.info("removing the folder of pod uid %s, which no pod or container refers to", entry.name)
                self._remove_pod_dir(entry.name)

