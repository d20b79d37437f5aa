"""``kubectl version``: this client's version and the server's ``gitVersion``."""

from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Annotated

import typer

from cli.session import Session


def version(
    ctx: typer.Context,
    client_only: Annotated[bool, typer.Option("--client", help="Only the client version; needs no server.")] = False,
) -> None:
    """Print the client and server versions."""
    session: Session = ctx.obj
    print(f"Client Version: v{package_version('minik8s')}", flush=True)
    if not client_only:
        print(f"Server Version: {session.client.request('GET', '/version').get('gitVersion', 'unknown')}")
