"""Daemon settings: one pydantic model per daemon, filled from flags, then environment, then defaults.

Each field is one flag and one environment variable (``etcd_servers`` is
``--etcd-servers`` and ``MINIK8S_ETCD_SERVERS``), so systemd units, supervisord
programs and a developer's shell configure a daemon the same way, and the model
validates every value in one place whatever its source.
"""

from __future__ import annotations

import argparse
import os
import types
from collections.abc import Mapping
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo

from daemons.machinery.log import LEVELS

S = TypeVar("S", bound=BaseModel)


class DaemonSettings(BaseModel):
    """Settings every daemon has; a daemon subclasses this with its own fields."""

    model_config = ConfigDict(extra="forbid")

    kubeconfig: str | None = Field(
        None, description="kubeconfig file with the apiserver's address and this daemon's credentials"
    )
    log_level: str = Field("INFO", description="log level: DEBUG, INFO, WARNING, ERROR or CRITICAL")
    amqp_url: str | None = Field(
        None,
        description="RabbitMQ URL of the event bus, e.g. amqp://user:password@host:5672/; "
        "without it, informers follow the apiserver's HTTP watch",
    )

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        name = value.upper()
        if name not in LEVELS:
            raise ValueError(f"must be one of {', '.join(LEVELS)}")
        return name


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def env_name(field_name: str, env_prefix: str = "MINIK8S_") -> str:
    return env_prefix + field_name.upper()


def _shape(info: FieldInfo) -> str:
    """How a field is spelled on the command line: ``bool``, ``list`` (a,b), ``dict`` (k=v,k=v) or ``scalar``."""
    annotation = info.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            annotation = members[0]
    origin = get_origin(annotation) or annotation
    if annotation is bool:
        return "bool"
    if origin in (list, tuple, set, frozenset):
        return "list"
    if origin is dict:
        return "dict"
    return "scalar"


def _split(shape: str, raw: str) -> Any:
    """Turn a comma-separated flag or environment value into what the field's type expects."""
    parts = [part.strip() for part in raw.split(",") if part.strip()]
    if shape == "list":
        return parts
    if shape == "dict" and all("=" in part for part in parts):
        return dict(part.split("=", 1) for part in parts)
    return raw  # left to the model, which reports it against the field


def build_parser(
    model_cls: type[BaseModel],
    env_prefix: str = "MINIK8S_",
    prog: str | None = None,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """An argparse parser with one flag per field; flags left out are absent from the parsed namespace."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description or (model_cls.__doc__ or "").strip() or None,
        argument_default=argparse.SUPPRESS,
    )
    for name, info in model_cls.model_fields.items():
        shape = _shape(info)
        hints = [f"env {env_name(name, env_prefix)}"]
        if not info.is_required() and info.default not in (None, [], {}) and info.default_factory is None:
            hints.append(f"default: {info.default}")
        if shape in ("list", "dict"):
            hints.append("comma-separated" + (" key=value pairs" if shape == "dict" else ""))
        help_text = f"{info.description or name.replace('_', ' ')} ({'; '.join(hints)})".replace("%", "%%")
        if shape == "bool":
            parser.add_argument(flag_name(name), dest=name, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            parser.add_argument(flag_name(name), dest=name, metavar=name.upper(), help=help_text)
    return parser


def parse_settings(
    model_cls: type[S],
    argv: list[str] | None = None,
    env_prefix: str = "MINIK8S_",
    *,
    environ: Mapping[str, str] | None = None,
    prog: str | None = None,
    description: str | None = None,
) -> S:
    """Build ``model_cls`` from ``argv`` (default ``sys.argv[1:]``) over ``environ`` (default ``os.environ``).

    A value that does not validate ends the process as argparse does (usage, one
    ``error:`` line naming the flag, exit status 2).
    """
    environ = os.environ if environ is None else environ
    parser = build_parser(model_cls, env_prefix, prog, description)
    given = vars(parser.parse_args(argv))
    values: dict[str, Any] = {}
    from_env: set[str] = set()
    for name, info in model_cls.model_fields.items():
        shape = _shape(info)
        if name in given:
            values[name] = given[name] if shape == "bool" else _split(shape, given[name])
        elif env_name(name, env_prefix) in environ:
            raw = environ[env_name(name, env_prefix)]
            values[name] = raw if shape == "bool" else _split(shape, raw)
            from_env.add(name)
    try:
        return model_cls.model_validate(values)
    except ValidationError as error:
        problems = []
        for item in error.errors():
            field = str(item["loc"][0]) if item["loc"] else ""
            if field not in model_cls.model_fields:
                problems.append(f"invalid settings: {item['msg']}")
                continue
            source = f" (from {env_name(field, env_prefix)})" if field in from_env else ""
            shown = f" (got {values[field]!r})" if field in values else ""
            problems.append(f"argument {flag_name(field)}{source}: {item['msg']}{shown}")
        parser.error("; ".join(problems))
