"""v1 ConfigMap: configuration a pod reads as files or environment, in ``data`` (text) and ``binaryData``.

Checks as upstream's ValidateConfigMap: keys are config keys, a key is in one bag only, the whole is at most
1 MiB, and an ``immutable`` ConfigMap keeps its contents for good.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime

from daemons.api import tables
from daemons.api.bundle import Column, FieldError, Obj, Resource
from daemons.api.models import KubeObject

# corev1.MaxSecretSize: the most a ConfigMap's or a Secret's values may hold together.
MAX_SIZE = 1024 * 1024
CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
CONFIG_KEY_MAX_LENGTH = 253
CONFIG_KEY_ERROR = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
                    "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
                    "'[-._a-zA-Z0-9]+')")
IMMUTABLE = "field is immutable when `immutable` is set"


class ConfigMap(KubeObject):
    data: dict[str, str] | None = None
    binary_data: dict[str, str] | None = None
    immutable: bool | None = None


def config_key_errors(key: str) -> list[str]:
    """Why ``key`` cannot name a file in a volume or an environment variable (validation.IsConfigMapKey)."""
    errors = []
    if len(key) > CONFIG_KEY_MAX_LENGTH:
        errors.append(f"must be no more than {CONFIG_KEY_MAX_LENGTH} characters")
    if not CONFIG_KEY.fullmatch(key):
        errors.append(CONFIG_KEY_ERROR)
    if key == ".":
        errors.append("must not be '.'")
    elif key == "..":
        errors.append("must not be '..'")
    elif key.startswith(".."):
        errors.append("must not start with '..'")
    return errors


def decoded(value: str) -> bytes | None:
    """The bytes a base64 field carries; None when it is not base64 (Go's decoder refuses it too)."""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def check_binary(path: str, values: dict[str, str]) -> tuple[list[FieldError], int]:
    """Errors of base64 values under ``path`` and the number of bytes they decode to."""
    errors, size = [], 0
    for key, value in values.items():
        raw = decoded(value)
        if raw is None:
            errors.append(FieldError.invalid(f"{path}[{key}]", "<value redacted>", "illegal base64 data"))
        else:
            size += len(raw)
    return errors, size


def immutable_errors(obj: Obj, current: Obj, fields: tuple[str, ...]) -> list[FieldError]:
    """An update of an immutable ConfigMap or Secret may neither unset ``immutable`` nor change ``fields``."""
    if not current.get("immutable"):
        return []
    errors = []
    if not obj.get("immutable"):
        errors.append(FieldError.forbidden("immutable", IMMUTABLE))
    errors += [FieldError.forbidden(name, IMMUTABLE) for name in fields
               if (obj.get(name) or {}) != (current.get(name) or {})]
    return errors


def check(obj: Obj, current: Obj | None) -> list[FieldError]:
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    errors = []
    for path, keys, other, name in (("data", data, binary, "binaryData"), ("binaryData", binary, data, "data")):
        for key in keys:
            errors += [FieldError.invalid(f"{path}[{key}]", key, message) for message in config_key_errors(key)]
            if key in other:
                errors.append(FieldError.invalid(f"{path}[{key}]", key, f"duplicate of key present in {name}"))
    binary_errors, size = check_binary("binaryData", binary)
    errors += binary_errors
    if size + sum(len(value.encode()) for value in data.values()) > MAX_SIZE:
        errors.append(FieldError.too_long("", MAX_SIZE))
    return errors


def check_update(obj: Obj, current: Obj) -> list[FieldError]:
    return immutable_errors(obj, current, ("data", "binaryData"))


def data_count(obj: Obj, _now: datetime) -> int:
    return len(obj.get("data") or {}) + len(obj.get("binaryData") or {})


RESOURCE = Resource(
    "ConfigMap", "configmaps", ConfigMap, short_names=("cm",), has_status=False, check=check,
    check_update=check_update,
    columns=(Column("Data", "string", data_count), tables.AGE),
)
