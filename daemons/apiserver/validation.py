"""Turning a request body into a valid, defaulted object, or an ``Invalid`` naming each field."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from daemons.api import models
from daemons.api.errors import BadRequest, Invalid
from daemons.api.resources import Resource

NAME_CHECKS = {
    "subdomain": models.check_dns1123_subdomain,
    "label": models.check_dns1123_label,
    "dns1035": models.check_dns1035_label,
}
# Model validators report cross-field problems as "<relative.field>: <message>".
_FIELD_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9.\[\]]*): (.*)$", re.S)
# A model validator's message may name its kind of error, as Kubernetes' field errors do.
_REASONS = {"Required value": "FieldValueRequired", "Forbidden": "FieldValueForbidden",
            "Duplicate value": "FieldValueDuplicate", "Unsupported value": "FieldValueNotSupported",
            "Invalid value": "FieldValueInvalid"}


def field_path(location: tuple[Any, ...]) -> str:
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def causes_of(error: ValidationError) -> list[dict[str, str]]:
    """One Kubernetes ``StatusCause`` per pydantic error, with the wire path of the field."""
    causes = []
    for item in error.errors():
        location = tuple(part for part in item["loc"] if not (isinstance(part, str) and "[" in part))
        path = field_path(location)
        message = item["msg"].removeprefix("Value error, ")
        match = _FIELD_PREFIX.match(message)
        if item["type"] == "value_error" and match:
            path = f"{path}.{match.group(1)}" if path else match.group(1)
            message = match.group(2)
        if item["type"] == "missing":
            reason, text = "FieldValueRequired", "Required value"
        elif item["type"] == "literal_error":
            expected = item.get("ctx", {}).get("expected", "")
            reason = "FieldValueNotSupported"
            text = f"Unsupported value: {item['input']!r}: supported values: {expected}"
        elif item["type"] == "value_error" and message.split(":", 1)[0] in _REASONS:
            reason, text = _REASONS[message.split(":", 1)[0]], message
        elif item["type"] == "value_error":
            reason, text = "FieldValueInvalid", f"Invalid value: {message}"
        else:
            reason, text = "FieldValueInvalid", f"Invalid value: {item.get('input')!r}: {message}"
        causes.append({"reason": reason, "message": text, "field": path})
    return causes


def unknown_fields(model: BaseModel, path: str = "") -> list[str]:
    """Wire paths of fields the models do not know: reported to clients as warnings."""
    found = [f"{path}.{key}" if path else key for key in (model.model_extra or {})]
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        child = f"{path}.{field.alias or name}" if path else (field.alias or name)
        if isinstance(value, BaseModel):
            found += unknown_fields(value, child)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, BaseModel):
                    found += unknown_fields(item, f"{child}[{index}]")
    return found


def validate(resource: Resource, obj: dict[str, Any], strict: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The defaulted wire form of ``obj`` and its unknown fields; ``Invalid`` lists every bad field.

    With ``strict`` (``fieldValidation=Strict``) an unknown field is an error rather than a warning.
    """
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = metadata.get("name")
    causes: list[dict[str, str]] = []
    if not name:
        causes.append({"reason": "FieldValueRequired", "field": "metadata.name",
                       "message": "Required value: name or generateName is required"})
    else:
        try:
            NAME_CHECKS[resource.name_format](str(name))
        except ValueError as error:
            causes.append({"reason": "FieldValueInvalid", "field": "metadata.name",
                           "message": f"Invalid value: {name!r}: {error}"})
    try:
        model = resource.model.model_validate(obj)
    except ValidationError as error:
        causes += causes_of(error)
        raise Invalid.for_object(resource.kind, name, causes, resource.group) from None
    if causes:
        raise Invalid.for_object(resource.kind, name, causes, resource.group)
    unknown = unknown_fields(model)
    if strict and unknown:
        raise BadRequest("strict decoding error: " + ", ".join(f'unknown field "{field}"' for field in unknown))
    return model.wire(), unknown
