"""``kubectl rollout``: watch, list, undo and restart the rollouts of Deployments and DaemonSets; pause and
resume a Deployment's.

A Deployment's history is its ReplicaSets: each carries the revision annotation the
deployment controller gave it, and its template is what undo copies back. A DaemonSet's
history is the list of templates its controller records in an annotation (ControllerRevisions
are not served). The messages are upstream kubectl's, so scripts that read them keep working.
"""

from __future__ import annotations

import re
import sys
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
import yaml

from cli.session import CLIError, Session, object_ref, type_and_names
from daemons.api.kinds.daemonset import recorded_history
from daemons.api.resources import Resource, require
from daemons.api.times import rfc3339

Obj = dict[str, Any]

DEPLOYMENTS = require("apps/v1", "Deployment")
DAEMONSETS = require("apps/v1", "DaemonSet")
REPLICASETS = require("apps/v1", "ReplicaSet")
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
CHANGE_CAUSE = "kubernetes.io/change-cause"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
# Deployment annotations that undo keeps rather than taking them from the ReplicaSet (as upstream).
KEPT_ON_UNDO = ("kubectl.kubernetes.io/last-applied-configuration", REVISION,
                "deployment.kubernetes.io/revision-history", "deployment.kubernetes.io/desired-replicas",
                "deployment.kubernetes.io/max-replicas", "deprecated.deployment.rollback.to")
POLL_SECONDS = 1.0

app = typer.Typer(name="rollout", help="Manage the rollout of a deployment or daemon set.", no_args_is_help=True,
                  rich_markup_mode=None)


# --- pure ---------------------------------------------------------------------------------------------


def status_message(deployment: Obj) -> tuple[str, bool]:
    """What ``rollout status`` says about ``deployment`` now, and whether the rollout is done.

    A rollout past its progress deadline is an error, as upstream's status viewer has it.
    """
    name = deployment["metadata"]["name"]
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    if int(deployment["metadata"].get("generation") or 0) > int(status.get("observedGeneration") or 0):
        return "Waiting for deployment spec update to be observed...", False
    progressing = next((item for item in status.get("conditions") or [] if item.get("type") == "Progressing"), None)
    if progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded":
        raise CLIError(f'deployment "{name}" exceeded its progress deadline')
    wanted = int(spec.get("replicas", 1))
    replicas, updated = int(status.get("replicas") or 0), int(status.get("updatedReplicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    if updated < wanted:
        return (f'Waiting for deployment "{name}" rollout to finish: {updated} out of {wanted} new replicas have '
                "been updated..."), False
    if replicas > updated:
        return (f'Waiting for deployment "{name}" rollout to finish: {replicas - updated} old replicas are pending '
                "termination..."), False
    if available < updated:
        return (f'Waiting for deployment "{name}" rollout to finish: {available} of {updated} updated replicas are '
                "available..."), False
    return f'deployment "{name}" successfully rolled out', True


def daemonset_status_message(ds: Obj) -> tuple[str, bool]:
    """What ``rollout status`` says about a DaemonSet, as upstream's DaemonSetStatusViewer; only a RollingUpdate
    has a rollout to watch."""
    name = ds["metadata"]["name"]
    strategy = ((ds.get("spec") or {}).get("updateStrategy") or {}).get("type") or "RollingUpdate"
    if strategy != "RollingUpdate":
        raise CLIError("rollout status is only available for RollingUpdate strategy type")
    status = ds.get("status") or {}
    if int(ds["metadata"].get("generation") or 0) > int(status.get("observedGeneration") or 0):
        return "Waiting for daemon set spec update to be observed...", False
    desired, updated = int(status.get("desiredNumberScheduled") or 0), int(status.get("updatedNumberScheduled") or 0)
    available = int(status.get("numberAvailable") or 0)
    if updated < desired:
        return (f'Waiting for daemon set "{name}" rollout to finish: {updated} out of {desired} new pods have been '
                "updated..."), False
    if available < desired:
        return (f'Waiting for daemon set "{name}" rollout to finish: {available} of {desired} updated pods are '
                "available..."), False
    return f'daemon set "{name}" successfully rolled out', True


def parse_duration(text: str) -> float:
    """A Go duration such as ``90s``, ``5m`` or ``1h30m`` in seconds; ``0`` means no limit."""
    text = text.strip()
    if text in ("0", ""):
        return 0.0
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise CLIError(f'invalid argument "{text}" for "--timeout" flag: time: invalid duration "{text}"')
    return sum(float(number) * units[unit] for number, unit in parts)


def revision_of(rs: Obj) -> int:
    value = ((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION, "")
    return int(value) if value.isdigit() else 0


def history(deployment: Obj, rses: list[Obj]) -> dict[int, Obj]:
    """The Deployment's ReplicaSets (those it controls) by revision."""
    uid = deployment["metadata"].get("uid")
    owned = [rs for rs in rses if any(ref.get("controller") and ref.get("uid") == uid
                                      for ref in (rs.get("metadata") or {}).get("ownerReferences") or [])]
    return {revision_of(rs): rs for rs in owned if revision_of(rs) > 0}


def daemonset_history(ds: Obj) -> dict[int, Obj]:
    """The DaemonSet's recorded templates by revision, each as a ``{"metadata", "spec": {"template"}}`` the way
    a ReplicaSet carries its own, so history, undo and their messages treat both kinds alike."""
    revisions: dict[int, Obj] = {}
    for entry in recorded_history(ds):
        annotations = {CHANGE_CAUSE: entry["changeCause"]} if entry.get("changeCause") else {}
        revisions[entry["revision"]] = {"metadata": {"annotations": annotations},
                                        "spec": {"template": entry.get("template") or {}}}
    return revisions


def history_table(revisions: dict[int, Obj]) -> list[str]:
    """``REVISION  CHANGE-CAUSE`` lines, oldest first."""
    rows = [("REVISION", "CHANGE-CAUSE")]
    for number in sorted(revisions):
        cause = ((revisions[number].get("metadata") or {}).get("annotations") or {}).get(CHANGE_CAUSE)
        rows.append((str(number), cause or "<none>"))
    width = max(len(number) for number, _ in rows) + 2
    return [f"{number:<{width}}{cause}" for number, cause in rows]


def pod_template(rs: Obj) -> Obj:
    """The ReplicaSet's pod template without the pod-template-hash label it got from the controller."""
    template = yaml.safe_load(yaml.safe_dump((rs.get("spec") or {}).get("template") or {}))
    labels = (template.get("metadata") or {}).get("labels")
    if labels is not None:
        labels.pop(HASH_LABEL, None)
    return template


def pick_revision(name: str, revisions: dict[int, Obj], to_revision: int, kind: str = "deployment") -> tuple[int, Obj]:
    """The revision undo goes back to: the one asked for, or (0) the one before the latest."""
    if not revisions:
        raise CLIError(f'no rollout history found for {kind} "{name}"')
    if to_revision == 0:
        if len(revisions) < 2:
            raise CLIError("no last revision to roll back to")
        number = sorted(revisions)[-2]
        return number, revisions[number]
    if to_revision not in revisions:
        raise CLIError(f"unable to find specified revision {to_revision} in history")
    return to_revision, revisions[to_revision]


def undo_patch(deployment: Obj, rs: Obj) -> list[Obj]:
    """The JSON patch that puts the ReplicaSet's template (and its annotations) back into the Deployment."""
    current = (deployment.get("metadata") or {}).get("annotations") or {}
    annotations = {key: current[key] for key in KEPT_ON_UNDO if key in current}
    for key, value in ((rs.get("metadata") or {}).get("annotations") or {}).items():
        if key not in KEPT_ON_UNDO:
            annotations[key] = value
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": deployment["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/spec/template", "value": pod_template(rs)},
            {"op": "add", "path": "/metadata/annotations", "value": annotations}]


def daemonset_undo_patch(ds: Obj, template: Obj) -> list[Obj]:
    """The JSON patch that puts a recorded template back into the DaemonSet, unless it changed since read."""
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": ds["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/spec/template", "value": template}]


def restart_patch(now: datetime) -> Obj:
    return {"spec": {"template": {"metadata": {"annotations": {
        RESTARTED_AT: rfc3339(now)}}}}}


# --- verbs --------------------------------------------------------------------------------------------


def targets(args: list[str], kinds: tuple[Resource, ...] = (DEPLOYMENTS, DAEMONSETS)) -> list[tuple[Resource, str]]:
    """The objects named as ``deployment/web``, ``ds/agent`` or ``deployment web``; other kinds have no
    rollouts here."""
    found: list[tuple[Resource, str]] = []
    for row, listed in type_and_names(args):
        if row not in kinds:
            allowed = " and ".join(kind.plural for kind in kinds)
            raise CLIError(f"no rollout support for {row.plural}: only {allowed} roll out")
        if not listed:
            raise CLIError("required resource not specified")
        found += [(row, name) for name in listed]
    return found


def deployment_names(args: list[str]) -> list[str]:
    """The Deployments named: pausing and resuming are theirs alone."""
    return [name for _row, name in targets(args, (DEPLOYMENTS,))]


def _get(session: Session, resource: Resource, name: str) -> Obj:
    return session.client.get(resource, name, session.namespace)


def _revisions(session: Session, row: Resource, obj: Obj) -> dict[int, Obj]:
    if row is DAEMONSETS:
        return daemonset_history(obj)
    return history(obj, session.client.list(REPLICASETS, session.namespace).get("items") or [])


Args = Annotated[list[str], typer.Argument(help="deployment/NAME, daemonset/NAME, or TYPE NAME")]


@app.command("status")
def status(
    ctx: typer.Context,
    args: Args,
    timeout: Annotated[str, typer.Option("--timeout", help="How long to wait (e.g. 90s, 5m); 0 waits forever.")] = "0s",
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Wait until the rollout finishes.")] = True,
) -> None:
    """Show the status of the rollout, waiting until it finishes."""
    session: Session = ctx.obj
    limit = parse_duration(timeout)
    for row, name in targets(args):
        viewer = status_message if row is DEPLOYMENTS else daemonset_status_message
        deadline = time.monotonic() + limit if limit else None
        said = None
        while True:
            message, done = viewer(_get(session, row, name))
            if message != said:
                print(message, flush=True)
                said = message
            if done or not watch:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise CLIError("timed out waiting for the condition")
            time.sleep(POLL_SECONDS)


@app.command("history")
def history_command(
    ctx: typer.Context,
    args: Args,
    revision: Annotated[int, typer.Option("--revision", min=0, help="Show the details of this revision.")] = 0,
) -> None:
    """List the revisions of a deployment or daemon set, or show one."""
    session: Session = ctx.obj
    for row, name in targets(args):
        revisions = _revisions(session, row, _get(session, row, name))
        if revision:
            if revision not in revisions:
                raise CLIError(f"unable to find the specified revision {revision}")
            print(f"{object_ref(row, name)} with revision #{revision}")
            print("Pod Template:")
            text = yaml.safe_dump(pod_template(revisions[revision]), sort_keys=False, default_flow_style=False)
            sys.stdout.write("".join(f"  {line}\n" for line in text.splitlines()))
            continue
        print(object_ref(row, name))
        print("\n".join(history_table(revisions)))
        print()


@app.command("undo")
def undo(
    ctx: typer.Context,
    args: Args,
    to_revision: Annotated[int, typer.Option("--to-revision", min=0,
                                             help="The revision to go back to; 0 is the previous one.")] = 0,
) -> None:
    """Roll back to a previous revision: its pod template goes back into the deployment or daemon set."""
    session: Session = ctx.obj
    for row, name in targets(args):
        obj = _get(session, row, name)
        if (obj.get("spec") or {}).get("paused"):
            raise CLIError(f"you cannot rollback a paused deployment; resume it first with 'kubectl rollout resume "
                           f"deployment/{name}' and try again")
        number, recorded = pick_revision(name, _revisions(session, row, obj), to_revision, row.singular)
        if pod_template(recorded) == pod_template({"spec": obj.get("spec")}):
            print(f"{object_ref(row, name)} skipped rollback (current template already matches revision {number})")
            continue
        patch = undo_patch(obj, recorded) if row is DEPLOYMENTS else daemonset_undo_patch(obj, pod_template(recorded))
        session.client.patch(row, name, patch, session.namespace, patch_type="json")
        print(f"{object_ref(row, name)} rolled back")


@app.command("restart")
def restart(ctx: typer.Context, args: Args) -> None:
    """Restart every pod of the deployment or daemon set through a new rollout."""
    session: Session = ctx.obj
    for row, name in targets(args):
        if (_get(session, row, name).get("spec") or {}).get("paused"):
            raise CLIError(f"{object_ref(row, name)}: can't restart paused deployment (run rollout resume first)")
        session.client.patch(row, name, restart_patch(datetime.now(UTC)), session.namespace)
        print(f"{object_ref(row, name)} restarted")


def _set_paused(ctx: typer.Context, args: list[str], paused: bool) -> None:
    session: Session = ctx.obj
    word = "paused" if paused else "resumed"
    for name in deployment_names(args):
        if bool((_get(session, DEPLOYMENTS, name).get("spec") or {}).get("paused")) == paused:
            print(f"{object_ref(DEPLOYMENTS, name)} already {word}")
            continue
        session.client.patch(DEPLOYMENTS, name, {"spec": {"paused": paused}}, session.namespace)
        print(f"{object_ref(DEPLOYMENTS, name)} {word}")


@app.command("pause")
def pause(ctx: typer.Context, args: Args) -> None:
    """Stop rolling out changes to the deployment's template until it is resumed."""
    _set_paused(ctx, args, True)


@app.command("resume")
def resume(ctx: typer.Context, args: Args) -> None:
    """Roll out the deployment's template again after a pause."""
    _set_paused(ctx, args, False)
