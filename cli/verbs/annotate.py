"""``kubectl annotate``: the same as ``label``, on ``metadata.annotations``."""

from __future__ import annotations

import typer

from cli.verbs.label import Args, Overwrite, update_metadata


def annotate(ctx: typer.Context, args: Args, overwrite: Overwrite = False) -> None:
    """Add, change (--overwrite) or remove (KEY-) annotations."""
    update_metadata(ctx.obj, args, "annotations", overwrite)
