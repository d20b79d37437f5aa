"""``kubectl``: the typer app, its global options, and turning every failure into one line and exit code 1."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli.session import Session, error_text
from cli.verbs import (
    annotate,
    api_resources,
    apply,
    autoscale,
    cordon,
    create,
    create_batch,
    delete,
    describe,
    drain,
    exec,
    get,
    label,
    logs,
    patch,
    rollout,
    scale,
    set_image,
    top,
    version,
    wait,
)
from daemons.api.errors import MiniK8sError

app = typer.Typer(
    name="kubectl",
    help="kubectl controls the minik8s cluster manager.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("apply")(apply.apply)
create_batch.register(create.app)
app.add_typer(create.app, name="create")
app.command("get")(get.get)
app.command("describe")(describe.describe)
app.command("delete")(delete.delete)
app.command("label")(label.label)
app.command("annotate")(annotate.annotate)
app.command("scale")(scale.scale)
app.command("autoscale")(autoscale.autoscale)
app.add_typer(rollout.app, name="rollout")
app.command("patch")(patch.patch)
app.command("cordon")(cordon.cordon)
app.command("uncordon")(cordon.uncordon)
app.command("drain")(drain.drain)
app.command("logs")(logs.logs)
app.command("exec")(exec.exec_command)
app.command("wait")(wait.wait)
app.command("api-resources")(api_resources.api_resources)
app.command("version")(version.version)
app.add_typer(top.app, name="top")
app.add_typer(set_image.app, name="set")


@app.callback()
def global_options(
    ctx: typer.Context,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help="Path to the kubeconfig file.")] = None,
    context: Annotated[str | None, typer.Option("--context", help="The kubeconfig context to use.")] = None,
    server: Annotated[str | None, typer.Option("--server", "-s", help="The API server's address.")] = None,
    token: Annotated[str | None, typer.Option("--token", help="Bearer token for the API server.")] = None,
    insecure: Annotated[bool, typer.Option("--insecure-skip-tls-verify",
                                           help="Do not check the server's certificate.")] = False,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="The namespace to work in.")] = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A",
                                                 help="List across all namespaces.")] = False,
) -> None:
    """Options that every verb takes, before or after the verb."""
    options = ctx.obj.options
    options.kubeconfig, options.context, options.server, options.token = kubeconfig, context, server, token
    options.insecure, options.namespace, options.all_namespaces = insecure, namespace, all_namespaces


def hoist_globals(argv: list[str], group: typer.core.TyperGroup) -> list[str]:
    """Move the global options to the front, as kubectl accepts them anywhere (click only before the verb).

    The verb's own options that take a value keep that value, so ``-l -n`` style values are not mistaken
    for globals; everything after ``--`` stays put.
    """

    def options(command: typer.core.TyperCommand) -> tuple[set[str], set[str]]:
        params = [param for param in command.params if isinstance(param, typer.core.TyperOption)]
        flags = {name for param in params if param.is_flag for name in param.opts}
        return flags, {name for param in params if not param.is_flag for name in param.opts}

    global_flags, global_valued = options(group)
    verb_valued: set[str] = set()
    hoisted: list[str] = []
    rest: list[str] = []
    verb_seen = False
    tokens = iter(argv)

    def value_after() -> list[str]:
        return [value for value in [next(tokens, None)] if value is not None]

    for token in tokens:
        name = token.split("=", 1)[0]
        attached_short = not token.startswith("--") and token[:2] in global_valued and len(token) > 2
        if token == "--":
            rest += [token, *tokens]
        elif name in global_flags:
            hoisted.append(token)
        elif attached_short:
            hoisted.append(token[:2] + token[2:].removeprefix("="))
        elif name in global_valued:
            hoisted += [token] if "=" in token else [token, *value_after()]
        elif name in verb_valued and "=" not in token:
            rest += [token, *value_after()]
        else:
            rest.append(token)
            if not verb_seen and not token.startswith("-"):
                verb_seen = True
                command = group.commands.get(token)
                verb_valued = options(command)[1] if command else set()
    return hoisted + rest


def run() -> None:
    """The console script: exit 0 on success, 1 when anything failed (after saying what)."""
    session = Session()
    command = typer.main.get_command(app)
    code: int | str | None = 0
    try:
        command.main(args=hoist_globals(sys.argv[1:], command), prog_name="kubectl", obj=session)
    except SystemExit as finished:
        code = finished.code
    except MiniK8sError as error:
        print(error_text(error), file=sys.stderr)
        code = 1
    finally:
        session.close()
    sys.exit(code or int(session.failed))
