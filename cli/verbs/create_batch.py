"""``kubectl create job`` and ``kubectl create cronjob``: one object from flags, as upstream's generators build it.

``create job NAME --from=cronjob/X`` instantiates a CronJob's jobTemplate by hand, owned by the CronJob and
annotated ``cronjob.kubernetes.io/instantiate: manual`` as upstream does.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.session import CLIError, Session, resource_type
from cli.verbs.create import DryRun, Output, _send
from daemons.api.resources import require

JOBS = require("batch/v1", "Job")
CRONJOBS = require("batch/v1", "CronJob")
INSTANTIATE_ANNOTATION = "cronjob.kubernetes.io/instantiate"
CRONJOB_RESTART_POLICIES = ("OnFailure", "Never")

Image = Annotated[str, typer.Option("--image", help="Image name to run.")]
Command = Annotated[list[str] | None, typer.Argument(help="-- COMMAND [ARGS...]")]


def _pod_template(name: str, image: str, command: list[str] | None, restart: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": image, "resources": {}}
    if command:
        container["command"] = list(command)
    return {"metadata": {}, "spec": {"containers": [container], "restartPolicy": restart}}


def job_manifest(name: str, image: str, command: list[str] | None) -> dict[str, Any]:
    """The Job ``kubectl create job NAME --image=IMAGE -- COMMAND`` sends: restartPolicy Never."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": _pod_template(name, image, command, "Never")}}


def job_from_cronjob(name: str, cronjob: dict[str, Any]) -> dict[str, Any]:
    """A Job made by hand from ``cronjob``'s jobTemplate, owned by the CronJob."""
    template = (cronjob.get("spec") or {}).get("jobTemplate") or {}
    template_metadata = template.get("metadata") or {}
    metadata = cronjob.get("metadata") or {}
    job_metadata: dict[str, Any] = {
        "name": name,
        "annotations": {INSTANTIATE_ANNOTATION: "manual", **(template_metadata.get("annotations") or {})},
        "ownerReferences": [{"apiVersion": CRONJOBS.api_version, "kind": CRONJOBS.kind, "name": metadata.get("name"),
                             "uid": metadata.get("uid"), "controller": True}],
    }
    if template_metadata.get("labels"):
        job_metadata["labels"] = dict(template_metadata["labels"])
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_metadata, "spec": dict(template.get("spec") or {})}


def cronjob_manifest(name: str, image: str, schedule: str, command: list[str] | None,
                     restart: str) -> dict[str, Any]:
    """The CronJob ``kubectl create cronjob`` sends."""
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
            "spec": {"schedule": schedule, "jobTemplate": {
                "metadata": {"name": name}, "spec": {"template": _pod_template(name, image, command, restart)}}}}


def job(ctx: typer.Context, name: str, command: Command = None, image: Image = "",
        from_: Annotated[str, typer.Option("--from", help="The name of the resource to create a Job from "
                                                           "(only cronjob is supported).")] = "",
        dry_run: DryRun = "none", output: Output = None) -> None:
    """Create a job with the specified name."""
    session: Session = ctx.obj
    if not image and not from_:
        raise CLIError("either --image or --from must be specified")
    if image and from_:
        raise CLIError("--image or --from must be specified")
    if command and from_:
        raise CLIError("cannot specify --from and command")
    if image:
        _send(session, JOBS, job_manifest(name, image, command), dry_run, output)
        return
    kind, _, source = from_.partition("/")
    if not source or resource_type(kind).kind != CRONJOBS.kind:
        raise CLIError(f"from must be an existing cronjob: {from_}")
    with session.each_object():
        cronjob = session.client.get(CRONJOBS, source, session.namespace)
    _send(session, JOBS, job_from_cronjob(name, cronjob), dry_run, output)


def cronjob(ctx: typer.Context, name: str, command: Command = None, image: Image = "",
            schedule: Annotated[str, typer.Option("--schedule", help="A schedule in the Cron format the job "
                                                                     "should be run with.")] = "",
            restart: Annotated[str, typer.Option("--restart", help="job's restart policy. supported values: "
                                                                   "OnFailure, Never")] = "OnFailure",
            dry_run: DryRun = "none", output: Output = None) -> None:
    """Create a cron job with the specified name."""
    if not image:
        raise CLIError("--image must be specified")
    if not schedule:
        raise CLIError("--schedule must be specified")
    if restart not in CRONJOB_RESTART_POLICIES:
        raise CLIError(f"invalid restart policy: {restart}")
    _send(ctx.obj, CRONJOBS, cronjob_manifest(name, image, schedule, command, restart), dry_run, output)


def register(app: typer.Typer) -> None:
    """Add ``job`` and ``cronjob`` (alias ``cj``) to the ``create`` command group."""
    app.command("job")(job)
    app.command("cronjob")(cronjob)
    app.command("cj", hidden=True)(cronjob)
