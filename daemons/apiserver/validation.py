"""Turning a request body into a valid object, or field errors; and the one place they become an ``Invalid``."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from daemons.api import models
from daemons.api.bundle import FieldError, Resource
from daemons.api.errors import BadRequest, Invalid

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


def causes_of(error: ValidationError) -> list[FieldError]:
    """One field error per pydantic error, with the wire path of the field."""
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
        causes.append(FieldError(reason, path, text))
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


def invalid(kind: str, name: str | None, problems: list[FieldError], group: str = "") -> Invalid:
    """The 422 for ``problems``, worded as upstream: one error inline, several in brackets."""
    summary = str(problems[0]) if len(problems) == 1 else "[" + ", ".join(map(str, problems)) + "]"
    causes = [{"reason": problem.reason, "message": problem.message, "field": problem.field}
              for problem in problems]
    return Invalid(f'{kind} "{name or ""}" is invalid: {summary}',
                   details={"name": name or "", "group": group, "kind": kind, "causes": causes})


def check_model(resource: Resource, obj: dict[str, Any]) -> tuple[dict[str, Any] | None, list[FieldError], list[str]]:
    """The model's wire form of ``obj`` (None when it does not parse), the field errors, and unknown fields."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = metadata.get("name")
    problems: list[FieldError] = []
    if not name:
        problems.append(FieldError.required("metadata.name", "name or generateName is required"))
    else:
        try:
            NAME_CHECKS[resource.name_format](str(name))
        except ValueError as error:
            problems.append(FieldError("FieldValueInvalid", "metadata.name", f"Invalid value: {name!r}: {error}"))
    try:
        model = resource.model.model_validate(obj)
    except ValidationError as error:
        return None, problems + causes_of(error), []
    return model.wire(), problems, unknown_fields(model)


def refuse_unknown(unknown: list[str]) -> None:
    """``fieldValidation=Strict``: an unknown field is an error rather than a warning."""
    if unknown:
        raise BadRequest("strict decoding error: " + ", ".join(f'unknown field "{field}"' for field in unknown))


def validate(resource: Resource, obj: dict[str, Any], strict: bool = False, current: dict[str, Any] | None = None,
             whole_object: bool = True) -> tuple[dict[str, Any], list[str]]:
    """The model's wire form of ``obj`` and its unknown fields, after the row's checks; ``Invalid`` lists every
    bad field. ``current`` is the stored object on update; ``whole_object`` is False for a write through a
    subresource, which the row's immutable-field rules (``check_update``) do not judge."""
    wire, problems, unknown = check_model(resource, obj)
    if wire is not None:
        problems += resource.check(wire, current)
        if current is not None and whole_object:
            problems += resource.check_update(wire, current)
    if problems:
        name = (obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}).get("name")
        raise invalid(resource.kind, name, problems, resource.group)
    if strict:
        refuse_unknown(unknown)
    assert wire is not None
    return wire, unknown
