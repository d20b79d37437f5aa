"""Liveness and readiness probes: exec, httpGet and tcpSocket, run on a small bounded thread pool.

One scheduler thread keeps every tracked probe in a heap by due time and hands
due probes to a pool of a few workers; a probe is never run twice at once. The
thresholds are counted by ``ProbeState.record`` (no I/O), and the pod worker is
told (``on_result``) after every run so that it can record events and, when a
result flipped, sync the pod: readiness drives the Ready conditions, a failed
liveness probe restarts the container.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx

log = logging.getLogger(__name__)

ProbeKind = Literal["liveness", "readiness"]
Exec = Callable[[str, list[str], float], tuple[int, bytes, bytes]]
ResultHandler = Callable[[str, str, ProbeKind, bool, str, bool], None]
# Whether the API already holds pod ``key``'s container ``container_id`` as ready (pod key, Docker id).
ReadyBefore = Callable[[str, str], bool]
MAX_WORKERS = 4
PROBE_FIELDS: tuple[tuple[ProbeKind, str], ...] = (("liveness", "livenessProbe"), ("readiness", "readinessProbe"))


@dataclass(frozen=True)
class ProbeSpec:
    """One probe of one container, with Kubernetes' defaults filled in."""

    action: Literal["exec", "httpGet", "tcpSocket"]
    command: tuple[str, ...] = ()
    port: int = 0
    path: str = "/"
    host: str = ""
    scheme: str = "HTTP"
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


def resolve_port(port: int | str, container: Mapping[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for candidate in container.get("ports") or []:
        if candidate.get("name") == port:
            return int(candidate["containerPort"])
    raise ValueError(f"container {container.get('name')!r} has no port named {port!r}")


def probe_spec(probe: Mapping[str, Any], container: Mapping[str, Any]) -> ProbeSpec:
    """The ``ProbeSpec`` of a livenessProbe or readinessProbe; ``ValueError`` when it has no usable action."""
    common = {
        "initial_delay": float(probe.get("initialDelaySeconds") or 0),
        "period": float(probe.get("periodSeconds") or 10),
        "timeout": float(probe.get("timeoutSeconds") or 1),
        "success_threshold": int(probe.get("successThreshold") or 1),
        "failure_threshold": int(probe.get("failureThreshold") or 3),
    }
    if probe.get("exec"):
        return ProbeSpec("exec", command=tuple(probe["exec"].get("command") or ()), **common)
    if probe.get("httpGet"):
        action = probe["httpGet"]
        return ProbeSpec("httpGet", port=resolve_port(action["port"], container), path=action.get("path") or "/",
                         host=action.get("host") or "", scheme=action.get("scheme") or "HTTP", **common)
    if probe.get("tcpSocket"):
        action = probe["tcpSocket"]
        return ProbeSpec("tcpSocket", port=resolve_port(action["port"], container), host=action.get("host") or "",
                         **common)
    raise ValueError("probe has no exec, httpGet or tcpSocket action")


@dataclass(frozen=True)
class ProbeState:
    """The probe's verdict and the consecutive results counted towards its thresholds."""

    healthy: bool
    successes: int = 0
    failures: int = 0

    @classmethod
    def initial(cls, kind: ProbeKind) -> ProbeState:
        """Kubernetes starts a container live but not ready."""
        return cls(healthy=kind == "liveness")

    def record(self, ok: bool, spec: ProbeSpec) -> ProbeState:
        """The state after one more result: the verdict flips once a threshold of equal results is reached."""
        if ok:
            successes = self.successes + 1
            healthy = self.healthy or successes >= spec.success_threshold
            return replace(self, healthy=healthy, successes=successes, failures=0)
        failures = self.failures + 1
        healthy = self.healthy and failures < spec.failure_threshold
        return replace(self, healthy=healthy, successes=0, failures=failures)


def run_probe(spec: ProbeSpec, pod_ip: str, container_id: str, exec_: Exec) -> tuple[bool, str]:
    """Run one probe; (passed, what went wrong)."""
    try:
        if spec.action == "exec":
            code, stdout, stderr = exec_(container_id, list(spec.command), spec.timeout)
            if code == 0:
                return True, ""
            output = (stdout + stderr).decode(errors="replace").strip()
            return False, output or f"command {list(spec.command)} exited with {code}"
        host = spec.host or pod_ip
        if spec.action == "tcpSocket":
            with socket.create_connection((host, spec.port), timeout=spec.timeout):
                return True, ""
        url = f"{spec.scheme.lower()}://{host}:{spec.port}{spec.path if spec.path.startswith('/') else '/' + spec.path}"
        response = httpx.get(url, timeout=spec.timeout, verify=False, headers={"User-Agent": "minik8s-probe/1.0"})
        if 200 <= response.status_code < 400:
            return True, ""
        return False, f"HTTP probe failed with statuscode: {response.status_code}"
    except Exception as error:  # a probe fails however its action fails
        return False, str(error) or type(error).__name__


@dataclass
class _Tracked:
    key: str
    container_id: str
    container_name: str
    kind: ProbeKind
    spec: ProbeSpec
    pod_ip: str
    state: ProbeState
    running: bool = False


class ProbeManager:
    """Runs the probes of every tracked container and keeps their verdicts."""

    def __init__(self, exec_: Exec, on_result: ResultHandler, workers: int = MAX_WORKERS,
                 clock: Callable[[], float] = time.monotonic,
                 ready_before: ReadyBefore = lambda _key, _container_id: False) -> None:
        self.exec = exec_
        self.on_result = on_result
        self.ready_before = ready_before
        self.clock = clock
        self._tracked: dict[tuple[str, ProbeKind], _Tracked] = {}
        self._heap: list[tuple[float, int, tuple[str, ProbeKind]]] = []
        self._sequence = itertools.count()
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="probe")
        self._stopped = False
        self._thread = threading.Thread(target=self._schedule, name="probe-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- what the pod worker calls ----------------------------------------------------------------

    def track(self, key: str, container_id: str, container: Mapping[str, Any], pod_ip: str) -> None:
        """Probe a running container (once per container id); its probes start after their initial delay.

        A container the API already reports ready under this very id was adopted by a restarted kubelet: it
        stays ready (and in its Services) until its probe says otherwise, as if the kubelet had never stopped.
        """
        for kind, field_name in PROBE_FIELDS:
            probe = container.get(field_name)
            if not probe:
                continue
            slot = (container_id, kind)
            with self._cond:
                if slot in self._tracked:
                    continue
            adopted_ready = kind == "readiness" and self.ready_before(key, container_id)
            with self._cond:
                if slot in self._tracked:
                    continue
                try:
                    spec = probe_spec(probe, container)
                except ValueError as error:
                    log.warning("%s: container %s: %s probe ignored: %s", key, container["name"], kind, error)
                    continue
                state = ProbeState(healthy=True) if adopted_ready else ProbeState.initial(kind)
                self._tracked[slot] = _Tracked(key, container_id, container["name"], kind, spec, pod_ip, state)
                self._push(slot, self.clock() + spec.initial_delay)

    def retain(self, key: str, container_ids: set[str]) -> None:
        """Stop probing the containers of pod ``key`` that are not in ``container_ids``."""
        with self._cond:
            for slot, tracked in list(self._tracked.items()):
                if tracked.key == key and tracked.container_id not in container_ids:
                    del self._tracked[slot]

    def ready(self, container_id: str) -> bool | None:
        """The readiness verdict, None when the container has no readiness probe."""
        with self._cond:
            tracked = self._tracked.get((container_id, "readiness"))
            return None if tracked is None else tracked.state.healthy

    def liveness_failed(self, container_id: str) -> bool:
        with self._cond:
            tracked = self._tracked.get((container_id, "liveness"))
            return tracked is not None and not tracked.state.healthy

    # --- running ----------------------------------------------------------------------------------

    def _push(self, slot: tuple[str, ProbeKind], due: float) -> None:
        heapq.heappush(self._heap, (due, next(self._sequence), slot))
        self._cond.notify()

    def _schedule(self) -> None:
        with self._cond:
            while not self._stopped:
                if not self._heap:
                    self._cond.wait()
                    continue
                due, _, slot = self._heap[0]
                wait = due - self.clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                tracked = self._tracked.get(slot)
                if tracked is None or tracked.running:
                    continue
                tracked.running = True
                self._pool.submit(self._run, slot, tracked)

    def _run(self, slot: tuple[str, ProbeKind], tracked: _Tracked) -> None:
        ok, message = run_probe(tracked.spec, tracked.pod_ip, tracked.container_id, self.exec)
        with self._cond:
            if self._tracked.get(slot) is not tracked:
                return  # untracked while it ran
            before = tracked.state.healthy
            tracked.state = tracked.state.record(ok, tracked.spec)
            tracked.running = False
            changed = tracked.state.healthy != before
            self._push(slot, self.clock() + tracked.spec.period)
        if changed:
            log.info("%s: container %s %s probe now %s", tracked.key, tracked.container_name, tracked.kind,
                     "passing" if ok else "failing")
        try:
            self.on_result(tracked.key, tracked.container_name, tracked.kind, ok, message, changed)
        except Exception:
            log.exception("%s: handling the %s probe result of %s failed", tracked.key, tracked.kind,
                          tracked.container_name)
