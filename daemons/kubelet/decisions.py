"""What to do with one container, decided from what Docker shows and the pod's restart policy (no I/O here).

The pod worker observes each spec container's newest Docker container and asks
``next_action``: leave it, create it, start it, kill it, restart it, or wait out
a crash-loop back-off. Back-off follows Kubernetes: the first restart is
immediate, then 10 s doubling up to 5 minutes; a container that ran for 10
minutes starts the count over. The count of quick restarts travels in a
container label, so the back-off outlives a kubelet restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from daemons.kubelet.spec import container_hash

BACKOFF_INITIAL_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0
BACKOFF_RESET_SECONDS = 600.0
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

ContainerState = Literal["created", "running", "exited"]
ActionKind = Literal["keep", "create", "start", "kill", "replace", "restart", "wait", "done"]


@dataclass(frozen=True)
class ObservedContainer:
    """One Docker container of a pod, as ``docker inspect`` showed it."""

    id: str
    name: str  # the spec container's name (POD for the pause container)
    state: ContainerState
    kind: str = "app"  # or "pause"
    pod_uid: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    restart_count: int = 0
    backoff: int = 0  # quick restarts before this container was created
    spec_hash: str = ""
    image: str = ""
    image_id: str = ""
    exit_code: int | None = None
    oom_killed: bool = False
    error: str = ""
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    ip_address: str = ""

    @property
    def ran_seconds(self) -> float:
        if self.started_at is None or self.finished_at is None:
            return 0.0
        return max((self.finished_at - self.started_at).total_seconds(), 0.0)

    @property
    def terminated_reason(self) -> str:
        """Kubernetes' reason for how it ended: OOMKilled, Completed, ContainerCannotRun or Error."""
        if self.oom_killed:
            return "OOMKilled"
        if self.error and self.started_at is None:
            return "ContainerCannotRun"
        return "Completed" if self.exit_code == 0 else "Error"


@dataclass(frozen=True)
class Action:
    """What ``next_action`` decided; ``delay`` is the back-off left for ``wait``."""

    kind: ActionKind
    reason: str = ""
    delay: float = 0.0
    restart_count: int = 0  # for create/restart/replace: the count the new container carries
    backoff: int = 0  # for create/restart/replace: the quick restarts before the new container


def backoff_delay(restarts: int) -> float:
    """Seconds to wait before the restart that follows ``restarts`` quick restarts: 0, 10, 20, 40 ... 300."""
    if restarts <= 0:
        return 0.0
    return min(BACKOFF_INITIAL_SECONDS * 2.0 ** (restarts - 1), BACKOFF_MAX_SECONDS)


def should_restart(restart_policy: str, exit_code: int | None) -> bool:
    if restart_policy == "Always":
        return True
    if restart_policy == "OnFailure":
        return exit_code != 0
    return False


def next_action(
    container: Mapping[str, Any],
    observed: ObservedContainer | None,
    restart_policy: str,
    now: datetime,
    *,
    liveness_failed: bool = False,
) -> Action:
    """The next step for spec ``container`` whose newest Docker container is ``observed`` (None: never created)."""
    if observed is None:
        return Action("create", "new container")
    if observed.state == "created":
        return Action("start", "created but not started")
    if observed.state == "running":
        if observed.spec_hash and observed.spec_hash != container_hash(container):
            return Action("replace", "container spec changed", restart_count=observed.restart_count + 1,
                          backoff=observed.backoff)
        if liveness_failed:
            return Action("kill", "failed liveness probe")
        return Action("keep")
    if not should_restart(restart_policy, observed.exit_code):
        return Action("done", f"exited with {observed.exit_code}, restartPolicy {restart_policy}")
    backoff = 0 if observed.ran_seconds >= BACKOFF_RESET_SECONDS else observed.backoff
    delay = backoff_delay(backoff)
    finished = observed.finished_at or now
    remaining = delay - (now - finished).total_seconds()
    if remaining > 0:
        return Action("wait", "crash-loop back-off", delay=remaining,
                      restart_count=observed.restart_count, backoff=backoff)
    return Action("restart", f"exited with {observed.exit_code}", restart_count=observed.restart_count + 1,
                  backoff=backoff + 1)


@dataclass(frozen=True)
class PodContainers:
    """A pod's Docker containers, each spec container's instances newest first."""

    pause: tuple[ObservedContainer, ...]
    apps: Mapping[str, tuple[ObservedContainer, ...]]

    @classmethod
    def of(cls, containers: list[ObservedContainer]) -> PodContainers:
        def newest_first(found: list[ObservedContainer]) -> tuple[ObservedContainer, ...]:
            return tuple(sorted(found, key=lambda c: (c.restart_count, c.created_at or EPOCH), reverse=True))

        apps: dict[str, list[ObservedContainer]] = {}
        for container in containers:
            if container.kind == "app":
                apps.setdefault(container.name, []).append(container)
        return cls(newest_first([c for c in containers if c.kind == "pause"]),
                   {name: newest_first(found) for name, found in apps.items()})

    @property
    def sandbox(self) -> ObservedContainer | None:
        return self.pause[0] if self.pause else None

    def newest(self, name: str) -> ObservedContainer | None:
        found = self.apps.get(name) or ()
        return found[0] if found else None

    def previous(self, name: str) -> ObservedContainer | None:
        found = self.apps.get(name) or ()
        return found[1] if len(found) > 1 else None

    def all(self) -> list[ObservedContainer]:
        return [*self.pause, *(c for found in self.apps.values() for c in found)]


@dataclass(frozen=True)
class InitProgress:
    """Where a pod's init containers stand: the one to act on now, and whether the app containers may run."""

    actions: Mapping[str, Action]  # at most one entry: the init container that runs or is to run now
    initialized: bool
    failed: bool = False  # one failed under restartPolicy Never: the pod fails


def init_progress(init_containers: list[Mapping[str, Any]], group: PodContainers, restart_policy: str,
                  now: datetime, app_names: list[str]) -> InitProgress:
    """Run init containers one at a time, in order, each to exit 0 before the next.

    A failed one restarts (with back-off) unless the pod's policy is Never, which
    fails the pod. Once any app container exists the pod counts as initialized,
    as upstream: init containers are not run again for it.
    """
    if not init_containers or any(group.newest(name) is not None for name in app_names):
        return InitProgress({}, True)
    policy = "Never" if restart_policy == "Never" else "OnFailure"
    for container in init_containers:
        newest = group.newest(container["name"])
        action = next_action(container, newest, policy, now)
        if action.kind == "done" and newest is not None and newest.exit_code == 0:
            continue
        return InitProgress({container["name"]: action}, False, failed=action.kind == "done")
    return InitProgress({}, True)
