"""One module per kubectl verb; the option declarations several verbs share live here."""

from __future__ import annotations

from typing import Annotated

import typer

Filenames = Annotated[list[str] | None, typer.Option(
    "--filename", "-f", help="File, folder (its *.yaml, *.yml, *.json) or - for stdin; repeatable.")]
Selector = Annotated[str | None, typer.Option(
    "--selector", "-l", help="Label selector, e.g. -l app=web,tier!=db.")]
Output = Annotated[str, typer.Option("--output", "-o", help="Output format: json, yaml, name or wide.")]
