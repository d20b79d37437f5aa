"""``kubectl drain``: cordon nodes, then evict their pods and wait until they are gone.

Which pods go and which block the drain follows kubectl's rules: DaemonSet pods
and pods not managed by a controller would not come back elsewhere, and
emptyDir data would be lost, so those refuse unless a flag says otherwise;
mirror pods are left to their kubelet. The pods are deleted (with the grace
period asked for), as our apiserver has no eviction subresource.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from cli.session import CLIError, Session, error_text
from cli.verbs import Selector
from cli.verbs.cordon import Nodes, selected_nodes, set_unschedulable
from daemons.api.errors import APIError, NotFound
from daemons.api.phases import TERMINAL_PHASES
from daemons.api.resources import by_kind

PODS = by_kind("v1", "Pod")
Obj = dict[str, Any]

POLL_SECONDS = 1.0
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
DAEMONSET_FATAL = "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore)"
DAEMONSET_WARNING = "ignoring DaemonSet-managed Pods"
LOCAL_STORAGE_FATAL = "cannot delete Pods with local storage (use --delete-emptydir-data to override)"
LOCAL_STORAGE_WARNING = "deleting Pods with local storage"
UNMANAGED_FATAL = "cannot delete Pods that declare no controller (use --force to override)"
UNMANAGED_WARNING = "deleting Pods that declare no controller"


@dataclass(frozen=True)
class DrainRules:
    """The flags that let a drain take pods it would otherwise refuse."""

    force: bool = False
    ignore_daemonsets: bool = False
    delete_emptydir_data: bool = False


@dataclass(frozen=True)
class Verdict:
    """What happens to one pod: deleted or left, with a warning or (refused) the reason it blocks the drain."""

    delete: bool
    message: str = ""
    refused: bool = False


OKAY = Verdict(True)


@dataclass
class DrainPlan:
    """The pods to evict, the warnings to print, and the refusals (``reason: ns/a, ns/b``) that stop the drain."""

    evict: list[Obj] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)


def pod_ref(pod: Obj) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def controller_of(pod: Obj) -> Obj | None:
    """The owner reference marked ``controller: true``, if any."""
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((owner for owner in owners if owner.get("controller")), None)


def _finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def _daemonset(pod: Obj, rules: DrainRules) -> Verdict:
    # kubectl also looks the DaemonSet up (a pod whose DaemonSet is gone goes with --force); the owner reference
    # alone decides here.
    controller = controller_of(pod)
    if controller is None or controller.get("kind") != "DaemonSet" or _finished(pod):
        return OKAY
    return Verdict(False, DAEMONSET_WARNING) if rules.ignore_daemonsets else Verdict(False, DAEMONSET_FATAL, True)


def _mirror(pod: Obj, _rules: DrainRules) -> Verdict:
    return Verdict(False) if MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}) else OKAY


def _local_storage(pod: Obj, rules: DrainRules) -> Verdict:
    volumes = (pod.get("spec") or {}).get("volumes") or []
    if _finished(pod) or not any("emptyDir" in volume for volume in volumes):
        return OKAY
    return Verdict(True, LOCAL_STORAGE_WARNING) if rules.delete_emptydir_data \
        else Verdict(False, LOCAL_STORAGE_FATAL, True)


def _unmanaged(pod: Obj, rules: DrainRules) -> Verdict:
    if _finished(pod) or controller_of(pod) is not None:
        return OKAY
    return Verdict(True, UNMANAGED_WARNING) if rules.force else Verdict(False, UNMANAGED_FATAL, True)


FILTERS = (_daemonset, _mirror, _local_storage, _unmanaged)


def verdict(pod: Obj, rules: DrainRules) -> Verdict:
    """The first filter that keeps the pod decides; a pod every filter lets go gets the last one's word (as
    kubectl, whose later filters replace an earlier warning)."""
    result = OKAY
    for check in FILTERS:
        result = check(pod, rules)
        if not result.delete:
            break
    return result


def _grouped(pairs: list[tuple[str, str]]) -> list[str]:
    """``message: ns/a, ns/b`` per message, in the order the messages first came up."""
    groups: dict[str, list[str]] = {}
    for message, ref in pairs:
        groups.setdefault(message, []).append(ref)
    return [f"{message}: {', '.join(refs)}" for message, refs in groups.items()]


def plan(pods: list[Obj], rules: DrainRules) -> DrainPlan:
    """Sort a node's pods into evicted, warned about and refused."""
    verdicts = [(pod, verdict(pod, rules)) for pod in pods]
    return DrainPlan(
        evict=[pod for pod, result in verdicts if result.delete],
        warnings=_grouped([(result.message, pod_ref(pod)) for pod, result in verdicts
                           if result.message and not result.refused]),
        refusals=_grouped([(result.message, pod_ref(pod)) for pod, result in verdicts if result.refused]),
    )


def aggregate(messages: list[str]) -> str:
    """Several errors in one line, as Go's error aggregates print them."""
    return messages[0] if len(messages) == 1 else f"[{', '.join(messages)}]"


DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration (``5m``, ``1h30m``, ``90s``, ``0``), as ``--timeout`` takes it."""
    if text in ("0", "+0", "-0"):
        return 0.0
    parts = DURATION_PART.findall(text)
    if not text or "".join(number + unit for number, unit in parts) != text:
        raise CLIError(f'invalid argument "{text}" for "--timeout" flag: time: invalid duration "{text}"')
    return sum(float(number) * DURATION_UNITS[unit] for number, unit in parts)


def go_duration(seconds: float) -> str:
    """A duration as Go prints it: ``5m0s``, ``1h0m0s``, ``30s``, ``1.5s``."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:g}s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{text}"
    return f"{int(minutes)}m{text}" if minutes else text


def is_gone(current: Obj | None, uid: str | None) -> bool:
    """A pod has left once it is not found, or its name now belongs to a new pod."""
    return current is None or (current.get("metadata") or {}).get("uid") != uid


class DrainFailed(Exception):
    """One node could not be drained; ``lines`` are what kubectl lists at the end."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(aggregate(lines))
        self.lines = lines


def drain(
    ctx: typer.Context,
    names: Nodes = None,
    selector: Selector = None,
    force: Annotated[bool, typer.Option("--force", help="Also delete pods that declare no controller.")] = False,
    ignore_daemonsets: Annotated[bool, typer.Option("--ignore-daemonsets",
                                                    help="Leave DaemonSet-managed pods in place.")] = False,
    delete_emptydir_data: Annotated[bool, typer.Option("--delete-emptydir-data",
                                                       help="Also delete pods with emptyDir volumes.")] = False,
    grace_period: Annotated[int, typer.Option("--grace-period",
                                              help="Seconds each pod gets to stop; -1 keeps the pod's own.")] = -1,
    timeout: Annotated[str, typer.Option("--timeout", help="How long to wait for the pods to go; 0 waits "
                                                            "forever.")] = "0s",
    pod_selector: Annotated[str | None, typer.Option("--pod-selector",
                                                     help="Only evict the pods matching this label selector.")] = None,
) -> None:
    """Cordon nodes and evict their pods, waiting until they are gone."""
    session: Session = ctx.obj
    limit = parse_duration(timeout)
    rules = DrainRules(force=force, ignore_daemonsets=ignore_daemonsets, delete_emptydir_data=delete_emptydir_data)
    nodes = selected_nodes(session, "drain", names, selector)
    for node in nodes:
        with session.each_object():
            set_unschedulable(session, node, True)
    if session.failed:
        return
    pending: list[str] = []
    failures: list[str] = []
    for node in nodes:
        name = node["metadata"]["name"]
        try:
            _drain_node(session, name, rules, None if grace_period < 0 else grace_period, limit, pod_selector)
        except DrainFailed as error:
            print(f'error: unable to drain node "{name}" due to error: {error}, continuing command...',
                  file=sys.stderr)
            pending.append(name)
            failures += error.lines
            continue
        print(f"node/{name} drained")
    if pending:
        print("There are pending nodes to be drained:", file=sys.stderr)
        print("\n".join(f" {name}" for name in pending), file=sys.stderr)
        print("\n".join(failures), file=sys.stderr)
        session.failed = True


def _pods_on(session: Session, node: str, pod_selector: str | None, rules: DrainRules) -> DrainPlan:
    assert PODS is not None
    listed = session.client.list(PODS, all_namespaces=True, field_selector=f"spec.nodeName={node}",
                                 label_selector=pod_selector)
    return plan(listed.get("items") or [], rules)


def _drain_node(session: Session, node: str, rules: DrainRules, grace_period: int | None, limit: float,
                pod_selector: str | None) -> None:
    """Evict what may go from one node and wait for it; any refusal, server error or the timeout fails it."""
    try:
        found = _pods_on(session, node, pod_selector, rules)
        if found.refusals:
            raise DrainFailed(found.refusals)
        if found.warnings:
            print(f"Warning: {'; '.join(found.warnings)}", file=sys.stderr)
        _evict_and_wait(session, found.evict, grace_period, limit)
    except (APIError, TimeoutError) as error:
        message = error_text(error) if isinstance(error, APIError) else str(error)
        left: list[Obj] = []
        with contextlib.suppress(APIError):
            left = _pods_on(session, node, pod_selector, rules).evict
        if left:
            print(f'There are pending pods in node "{node}" when an error occurred: {message}', file=sys.stderr)
            print("\n".join(f"pod/{pod['metadata']['name']}" for pod in left), file=sys.stderr)
        raise DrainFailed([message]) from None


def _evict_and_wait(session: Session, pods: list[Obj], grace_period: int | None, limit: float) -> None:
    """Delete every pod, then poll until each is gone (``pod/NAME evicted``) or ``limit`` seconds pass."""
    assert PODS is not None
    for pod in pods:
        metadata = pod["metadata"]
        with contextlib.suppress(NotFound):
            session.client.delete(PODS, metadata["name"], metadata["namespace"], grace_period_seconds=grace_period)
        print(f"evicting pod {pod_ref(pod)}", flush=True)
    deadline = time.monotonic() + limit if limit else None
    waiting = list(pods)
    while True:
        still = []
        for pod in waiting:
            metadata = pod["metadata"]
            try:
                current: Obj | None = session.client.get(PODS, metadata["name"], metadata["namespace"])
            except NotFound:
                current = None
            if is_gone(current, metadata.get("uid")):
                print(f"pod/{metadata['name']} evicted", flush=True)
            else:
                still.append(pod)
        waiting = still
        if not waiting:
            return
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"drain did not complete within {go_duration(limit)}")
        time.sleep(POLL_SECONDS if deadline is None else max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))
