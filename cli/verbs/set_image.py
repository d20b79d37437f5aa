"""``kubectl set image``: change container images of a pod template (or a pod), which starts a rollout."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.session import CLIError, Session, object_ref, type_and_names

app = typer.Typer(help="Set specific features on objects.", no_args_is_help=True, add_completion=False)


def split_images(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """Split ``deployment/web nginx=nginx:1.25 *=busybox`` into the resource arguments and container → image."""
    targets = [arg for arg in args if "=" not in arg]
    images = dict(arg.split("=", 1) for arg in args if "=" in arg)
    if not images:
        raise CLIError("at least one image update is required")
    if targets != args[:len(targets)]:
        raise CLIError("all resources must be specified before image changes")
    empty = [name for name, image in images.items() if not name or not image]
    if empty:
        raise CLIError(f"invalid image update {empty[0]!r}: expected CONTAINER=IMAGE")
    return targets, images


def image_patch(obj: dict[str, Any], images: dict[str, str]) -> dict[str, Any] | None:
    """The strategic merge patch that sets ``images`` in ``obj``'s pod template (a pod's own spec for a Pod);
    None when every image is already so.

    ``*`` stands for every container; a named container that the template lacks is an error.
    """
    pod_spec = obj["spec"] if obj.get("kind") == "Pod" else (obj.get("spec") or {}).get("template", {}).get("spec")
    if pod_spec is None:
        raise CLIError(f"{obj.get('kind')} {obj['metadata']['name']} has no pod template")
    changes: dict[str, list[dict[str, str]]] = {}
    for field in ("initContainers", "containers"):
        for container in pod_spec.get(field) or []:
            image = images.get(container["name"], images.get("*"))
            if image is not None and image != container.get("image"):
                changes.setdefault(field, []).append({"name": container["name"], "image": image})
    known = {container["name"] for field in ("initContainers", "containers") for container in pod_spec.get(field) or []}
    missing = sorted(set(images) - known - {"*"})
    if missing:
        raise CLIError(f'unable to find container named "{missing[0]}"')
    if not changes:
        return None
    return {"spec": changes} if obj.get("kind") == "Pod" else {"spec": {"template": {"spec": changes}}}


@app.command("image")
def image(
    ctx: typer.Context,
    args: Annotated[list[str], typer.Argument(help="TYPE NAME... or TYPE/NAME..., then CONTAINER=IMAGE...")],
) -> None:
    """Update the image of containers in a pod template (deployments, replica sets) or a pod."""
    session: Session = ctx.obj
    targets, images = split_images(args)
    for row, names in type_and_names(targets):
        if not names:
            raise CLIError("resource(s) were provided, but no name was specified")
        for name in names:
            with session.each_object():
                obj = session.client.get(row, name, session.namespace)
                patch = image_patch(obj, images)
                if patch is not None:  # as upstream, a command that changes nothing prints nothing
                    session.client.patch(row, name, patch, session.namespace, patch_type="strategic")
                    print(f"{object_ref(row, name)} image updated")
