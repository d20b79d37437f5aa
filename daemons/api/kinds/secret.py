"""v1 Secret: credentials kept apart from pod specs, base64 in ``data``; ``stringData`` is a write-only shortcut.

Defaults, checks and columns as upstream: ``stringData`` is merged into ``data`` on every write and never
stored, the type defaults to Opaque, each built-in type requires its keys, and the type never changes.
"""

from __future__ import annotations

import base64
import json

from daemons.api import tables
from daemons.api.bundle import Column, FieldError, Obj, Resource
from daemons.api.defaults import default_secret
from daemons.api.kinds.configmap import MAX_SIZE, check_binary, config_key_errors, immutable_errors
from daemons.api.models import KubeObject

OPAQUE = "Opaque"
SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"
DOCKERCFG = "kubernetes.io/dockercfg"
DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
BASIC_AUTH = "kubernetes.io/basic-auth"
SSH_AUTH = "kubernetes.io/ssh-auth"
TLS = "kubernetes.io/tls"
SERVICE_ACCOUNT_NAME_KEY = "kubernetes.io/service-account.name"
REDACTED = "<secret contents redacted>"


class Secret(KubeObject):
    data: dict[str, str] | None = None
    string_data: dict[str, str] | None = None
    type: str | None = None
    immutable: bool | None = None


def defaults(obj: Obj) -> None:
    """Merge ``stringData`` into ``data`` (its values win, as upstream's conversion) and default the type (Opaque)."""
    string_data = obj.pop("stringData", None)
    if string_data:
        data = obj.setdefault("data", {})
        if isinstance(data, dict) and isinstance(string_data, dict):
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
    if not obj.get("type"):
        obj.pop("type", None)
    default_secret(obj)


def _json_error(raw: bytes) -> str | None:
    """Why ``raw`` is not a JSON object, in the words of Go's decoder where they agree; None when it is one."""
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        return f"invalid character in JSON: {error}"
    if not isinstance(value, dict):
        return f"json: cannot unmarshal {type(value).__name__} into Go value of type map[string]interface {{}}"
    return None


def type_errors(secret_type: str, data: Obj, annotations: Obj) -> list[FieldError]:
    """The keys (or annotation) each built-in type requires, and well-formed Docker configs."""
    errors: list[FieldError] = []
    if secret_type == SERVICE_ACCOUNT_TOKEN:
        if not annotations.get(SERVICE_ACCOUNT_NAME_KEY):
            errors.append(FieldError.required(f"metadata.annotations[{SERVICE_ACCOUNT_NAME_KEY}]"))
    elif secret_type in (DOCKERCFG, DOCKER_CONFIG_JSON):
        key = ".dockercfg" if secret_type == DOCKERCFG else ".dockerconfigjson"
        if key not in data:
            errors.append(FieldError.required(f"data[{key}]"))
        else:
            try:
                problem = _json_error(base64.b64decode(data[key]))
            except ValueError:
                problem = None  # reported as bad base64 already
            if problem:
                errors.append(FieldError.invalid(f"data[{key}]", REDACTED, problem))
    elif secret_type == BASIC_AUTH:
        if "username" not in data and "password" not in data:
            errors += [FieldError.required("data[username]"), FieldError.required("data[password]")]
    elif secret_type == SSH_AUTH:
        if not data.get("ssh-privatekey"):
            errors.append(FieldError.required("data[ssh-privatekey]"))
    elif secret_type == TLS:
        errors += [FieldError.required(f"data[{key}]") for key in ("tls.crt", "tls.key") if key not in data]
    return errors


def check(obj: Obj, current: Obj | None) -> list[FieldError]:
    data = obj.get("data") or {}
    errors = []
    for key in data:
        errors += [FieldError.invalid(f"data[{key}]", key, message) for message in config_key_errors(key)]
    binary_errors, size = check_binary("data", data)
    errors += binary_errors
    if size > MAX_SIZE:
        errors.append(FieldError.too_long("data", MAX_SIZE))
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return errors + type_errors(obj.get("type") or OPAQUE, data, annotations)


def check_update(obj: Obj, current: Obj) -> list[FieldError]:
    errors = []
    if (obj.get("type") or OPAQUE) != (current.get("type") or OPAQUE):
        errors.append(FieldError.invalid("type", obj.get("type"), "field is immutable"))
    return errors + immutable_errors(obj, current, ("data",))


RESOURCE = Resource("Secret", "secrets", Secret, has_status=False, defaults=defaults, check=check,
                    check_update=check_update,
                    columns=(Column("Type", "string", lambda obj, _now: obj.get("type") or ""),
                             Column("Data", "string", lambda obj, _now: len(obj.get("data") or {})),
                             tables.AGE))
