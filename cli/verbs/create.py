"""``kubectl create``: ``-f`` POSTs every object in the manifests; the subcommands build one object from flags
as upstream's generators do (``namespace``, ``configmap``, ``secret generic|tls|docker-registry``,
``serviceaccount``)."""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from cli import manifests
from cli.printers import dump
from cli.session import CLIError, Session, object_ref
from cli.verbs import Filenames
from daemons.api.kinds.configmap import config_key_errors
from daemons.api.kinds.secret import DOCKER_CONFIG_JSON, TLS
from daemons.api.resources import Resource, require

NAMESPACES = require("v1", "Namespace")
CONFIGMAPS = require("v1", "ConfigMap")
SECRETS = require("v1", "Secret")
SERVICE_ACCOUNTS = require("v1", "ServiceAccount")
DEFAULT_DOCKER_SERVER = "https://index.docker.io/v1/"
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
ENV_NAME_ERROR = ("a valid environment variable name must consist of alphabetic characters, digits, '_', '-', "
                  "or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
                  "'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')")
DRY_RUN = ("none", "client", "server")

app = typer.Typer(name="create", help="Create a resource from a file or from stdin, or from flags.",
                  rich_markup_mode=None)

Literals = Annotated[list[str] | None, typer.Option(
    "--from-literal", help="A key and literal value (i.e. mykey=somevalue) to insert.")]
Files = Annotated[list[str] | None, typer.Option(
    "--from-file", help="A file, or a directory of files, to insert as [key=]source; the key is the file's name "
                        "by default.")]
EnvFiles = Annotated[list[str] | None, typer.Option(
    "--from-env-file", help="A file of KEY=value lines to insert.")]
DryRun = Annotated[str, typer.Option(
    "--dry-run", help="none, server, or client: with client, only print the object that would be sent.")]
Output = Annotated[str | None, typer.Option("--output", "-o", help="yaml, json or name: print the object so.")]


# --- building the data (pure but for reading the named files) -------------------------------------


def _check_key(key: str, kind: str) -> str:
    errors = config_key_errors(key)
    if errors:
        raise CLIError(f'"{key}" is not a valid key name for a {kind}: {";".join(errors)}')
    return key


def _add(data: dict[str, bytes], key: str, value: bytes, kind: str, name: str) -> None:
    if key in data:
        raise CLIError(f'cannot add key "{key}", another key by that name already exists in Data for {kind} '
                       f'"{name}"')
    data[key] = value


def literal_sources(values: list[str]) -> list[tuple[str, bytes]]:
    """``key=value`` flags, split at the first ``=``."""
    pairs = []
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise CLIError(f"invalid literal source {value}, expected key=value")
        pairs.append((key, text.encode()))
    return pairs


def file_sources(values: list[str]) -> list[tuple[str, bytes]]:
    """``[key=]path`` flags: a file under its name (or the key), a directory's regular files under theirs."""
    pairs = []
    for value in values:
        key, sep, path = value.partition("=")
        if not sep:
            key, path = "", value
        elif not key or not path:
            raise CLIError(f"key names or file paths cannot be empty: {value}")
        source = Path(path)
        if source.is_dir():
            if key:
                raise CLIError("cannot give a key name for a directory path")
            pairs += [(item.name, item.read_bytes()) for item in sorted(source.iterdir()) if item.is_file()]
        elif source.exists():
            pairs.append((key or source.name, source.read_bytes()))
        else:
            raise CLIError(f"error reading {path}: no such file or directory")
    return pairs


def env_file_sources(paths: list[str], environ: dict[str, str] | None = None) -> list[tuple[str, bytes]]:
    """``KEY=value`` lines; blank lines and ``#`` comments are skipped; a bare ``KEY`` takes the environment's
    value (and is skipped when unset), as kubectl does."""
    environ = os.environ if environ is None else environ
    pairs = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8-sig")
        except OSError as error:
            raise CLIError(f"error reading {path}: {error.strerror}") from None
        for raw in text.splitlines():
            line = raw.lstrip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not ENV_NAME.fullmatch(key):
                raise CLIError(f'"{key}" is not a valid key name: {ENV_NAME_ERROR}')
            if not sep:
                if key not in environ:
                    continue
                value = environ[key]
            pairs.append((key, value.encode()))
    return pairs


def gathered(kind: str, name: str, literals: list[str] | None, files: list[str] | None,
             env_files: list[str] | None) -> dict[str, bytes]:
    """Every key of the flags, each checked once, a repeated key refused."""
    data: dict[str, bytes] = {}
    for key, value in (file_sources(files or []) + literal_sources(literals or [])
                       + env_file_sources(env_files or [])):
        _add(data, _check_key(key, kind), value, kind, name)
    return data


def encoded(data: dict[str, bytes]) -> dict[str, str]:
    return {key: base64.b64encode(value).decode() for key, value in data.items()}


def configmap_manifest(name: str, data: dict[str, bytes]) -> dict[str, Any]:
    """Text values under ``data``, others (not UTF-8) base64 under ``binaryData``."""
    text, binary = {}, {}
    for key, value in data.items():
        try:
            text[key] = value.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(value).decode()
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    if text:
        body["data"] = text
    if binary:
        body["binaryData"] = binary
    return body


def secret_manifest(name: str, data: dict[str, bytes], secret_type: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}}
    if data:
        body["data"] = encoded(data)
    if secret_type:
        body["type"] = secret_type
    return body


def docker_config(server: str, username: str, password: str, email: str = "") -> bytes:
    """The ``.dockerconfigjson`` kubectl writes: one registry with its credentials and their ``auth``."""
    entry = {"username": username, "password": password}
    if email:
        entry["email"] = email
    entry["auth"] = base64.b64encode(f"{username}:{password}".encode()).decode()
    return json.dumps({"auths": {server: entry}}, separators=(",", ":")).encode()


# --- sending or printing ----------------------------------------------------------------------------


def _send(session: Session, resource: Resource, body: dict[str, Any], dry_run: str, output: str | None) -> None:
    """POST the object (``--dry-run=server`` asks the server to only check it); ``client`` only prints it."""
    if dry_run not in DRY_RUN:
        raise CLIError(f'Invalid dry-run value ({dry_run}). Must be "none", "server", or "client".')
    if output not in (None, "yaml", "json", "name"):
        raise CLIError(f"unable to match a printer suitable for the output format {output!r}, allowed formats "
                       "are: json,name,yaml")
    if resource.namespaced and (dry_run != "client" or session.options.namespace):
        body["metadata"]["namespace"] = session.namespace
    with session.each_object():
        if dry_run == "client":
            result = body
        else:
            params = {"dryRun": "All"} if dry_run == "server" else None
            result = session.client.create(resource, body, body["metadata"].get("namespace"), params=params)
        if output in ("yaml", "json"):
            print(dump(result, output).rstrip("\n"))
            return
        suffix = f" ({dry_run} dry run)" if dry_run != "none" else ""
        ref = object_ref(resource, result["metadata"]["name"])
        print(ref if output == "name" else f"{ref} created{suffix}")


@app.callback(invoke_without_command=True)
def create(ctx: typer.Context, filename: Filenames = None) -> None:
    """Create each object in the manifests (one that already exists is an error), or one object from flags."""
    if ctx.invoked_subcommand is not None:
        if filename:
            raise CLIError(f"create {ctx.invoked_subcommand} takes no -f")
        return
    if not filename:
        raise CLIError("must specify one of -f and -k, or a subcommand such as 'configmap NAME'")
    session: Session = ctx.obj
    loaded = manifests.load(filename, sys.stdin, "create")
    placed = [(manifest, session.namespace_of(manifest.resource, manifest.body)) for manifest in loaded]
    for manifest, namespace in placed:
        with session.each_object():
            created = session.client.create(manifest.resource, manifest.body, namespace)
            print(f"{object_ref(manifest.resource, created['metadata']['name'])} created")


def namespace(ctx: typer.Context, name: str, dry_run: DryRun = "none", output: Output = None) -> None:
    """Create a namespace with the given name."""
    _send(ctx.obj, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, dry_run,
          output)


def configmap(ctx: typer.Context, name: str, from_literal: Literals = None, from_file: Files = None,
              from_env_file: EnvFiles = None, dry_run: DryRun = "none", output: Output = None) -> None:
    """Create a config map from files, directories, literal values or env files."""
    data = gathered("ConfigMap", name, from_literal, from_file, from_env_file)
    _send(ctx.obj, CONFIGMAPS, configmap_manifest(name, data), dry_run, output)


def serviceaccount(ctx: typer.Context, name: str, dry_run: DryRun = "none", output: Output = None) -> None:
    """Create a service account with the specified name."""
    _send(ctx.obj, SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
          dry_run, output)


secret_app = typer.Typer(name="secret", help="Create a secret: generic, tls or docker-registry.",
                         no_args_is_help=True, rich_markup_mode=None)


@secret_app.command("generic")
def secret_generic(ctx: typer.Context, name: str, from_literal: Literals = None, from_file: Files = None,
                   from_env_file: EnvFiles = None,
                   secret_type: Annotated[str, typer.Option("--type", help="The type of secret to create.")] = "",
                   dry_run: DryRun = "none", output: Output = None) -> None:
    """Create a secret from files, directories, literal values or env files."""
    data = gathered("Secret", name, from_literal, from_file, from_env_file)
    _send(ctx.obj, SECRETS, secret_manifest(name, data, secret_type), dry_run, output)


@secret_app.command("tls")
def secret_tls(ctx: typer.Context, name: str,
               cert: Annotated[str, typer.Option("--cert", help="Path to the PEM encoded certificate.")] = "",
               key: Annotated[str, typer.Option("--key", help="Path to the private key of the certificate.")] = "",
               dry_run: DryRun = "none", output: Output = None) -> None:
    """Create a TLS secret from a certificate and its key."""
    if not cert or not key:
        raise CLIError("--cert and --key are required")
    data = {"tls.crt": Path(cert).read_bytes(), "tls.key": Path(key).read_bytes()}
    if b"-----BEGIN" not in data["tls.crt"] or b"-----BEGIN" not in data["tls.key"]:
        raise CLIError("failed to load key pair tls: failed to find any PEM data in certificate or key input")
    _send(ctx.obj, SECRETS, secret_manifest(name, data, TLS), dry_run, output)


@secret_app.command("docker-registry")
def secret_docker_registry(
    ctx: typer.Context, name: str,
    server: Annotated[str, typer.Option("--docker-server", help="Server location for the registry.")] = (
        DEFAULT_DOCKER_SERVER),
    username: Annotated[str, typer.Option("--docker-username", help="Username for the registry.")] = "",
    password: Annotated[str, typer.Option("--docker-password", help="Password for the registry.")] = "",
    email: Annotated[str, typer.Option("--docker-email", help="Email for the registry.")] = "",
    from_file: Files = None, dry_run: DryRun = "none", output: Output = None,
) -> None:
    """Create a secret for a container registry, as the ``.dockerconfigjson`` pods pull images with."""
    if from_file:
        data = gathered("Secret", name, None, from_file, None)
    elif username and password:
        data = {".dockerconfigjson": docker_config(server, username, password, email)}
    else:
        raise CLIError("either --from-file or the combination of --docker-username, --docker-password and "
                       "--docker-server is required")
    _send(ctx.obj, SECRETS, secret_manifest(name, data, DOCKER_CONFIG_JSON), dry_run, output)


for names, command in ((("namespace", "ns"), namespace), (("configmap", "cm"), configmap),
                       (("serviceaccount", "sa"), serviceaccount)):
    for alias in names:
        app.command(alias, hidden=alias != names[0])(command)
app.add_typer(secret_app, name="secret")
