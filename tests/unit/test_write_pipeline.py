"""The apiserver's kind-agnostic write pipeline: the order of its steps, the row's hooks, and the 422 it renders."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemons.api import models
from daemons.api.bundle import FieldError, Resource
from daemons.apiserver.admission import Admission, Attributes
from daemons.apiserver.registry import Registry
from daemons.apiserver.validation import invalid

pytestmark = pytest.mark.unit

Obj = dict[str, Any]


class Recording:
    """A plugin that writes its name into the calls list (and onto the object, if mutating)."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    async def admit(self, attributes: Attributes) -> None:
        self.calls.append(f"{self.name}:{attributes.operation}:{attributes.subresource}")
        if self.name == "mutating":
            attributes.obj.setdefault("metadata", {}).setdefault("labels", {})["admitted"] = "yes"


def pipeline(calls: list[str]) -> tuple[Registry, Resource]:
    def defaults(obj: Obj) -> None:
        calls.append("defaults:" + obj["metadata"].get("labels", {}).get("admitted", "no"))

    def check(obj: Obj, current: Obj | None) -> list[FieldError]:
        calls.append("check")
        return []

    def check_update(obj: Obj, current: Obj) -> list[FieldError]:
        calls.append("check_update")
        return [FieldError.forbidden("spec", "no")] if obj.get("spec") != current.get("spec") else []

    row = Resource("Widget", "widgets", models.KubeObject, group="example.com", defaults=defaults, check=check,
                   check_update=check_update)
    admission = Admission(mutating=(Recording("mutating", calls),), validating=(Recording("validating", calls),))
    return Registry(None, None, admission=admission), row  # type: ignore[arg-type]


def test_create_runs_mutating_admission_defaults_checks_then_validating_admission() -> None:
    calls: list[str] = []
    registry, row = pipeline(calls)
    obj, _warnings = asyncio.run(registry._admit(row, {"metadata": {"name": "w"}}, None, None, strict=False))
    assert calls == ["mutating:CREATE:None", "defaults:yes", "check", "validating:CREATE:None"]
    assert obj["metadata"]["labels"] == {"admitted": "yes"}


def test_update_adds_check_update_and_its_errors_refuse_the_write() -> None:
    calls: list[str] = []
    registry, row = pipeline(calls)
    current = {"metadata": {"name": "w"}, "spec": {"a": 1}}
    with pytest.raises(Exception) as raised:
        asyncio.run(registry._admit(row, {"metadata": {"name": "w"}, "spec": {"a": 2}}, current, None, False))
    assert calls[-2:] == ["check", "check_update"]
    assert raised.value.to_status()["details"]["causes"] == [  # type: ignore[attr-defined]
        {"reason": "FieldValueForbidden", "message": "Forbidden: no", "field": "spec"}]


def test_subresource_writes_are_neither_mutated_nor_defaulted() -> None:
    calls: list[str] = []
    registry, row = pipeline(calls)
    current = {"metadata": {"name": "w"}, "spec": {"a": 1}}
    asyncio.run(registry._admit(row, {"metadata": {"name": "w"}, "spec": {"a": 1}}, current, "status", False))
    assert calls == ["check", "validating:UPDATE:status"]


def test_invalid_status_words_one_error_inline_and_several_in_brackets() -> None:
    one = invalid("Pod", "web", [FieldError.required("spec.containers")]).to_status()
    assert one["code"] == 422 and one["reason"] == "Invalid"
    assert one["message"] == 'Pod "web" is invalid: spec.containers: Required value'
    assert one["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}]
    two = invalid("Pod", "web", [FieldError.required("a"), FieldError.invalid("b", 3, "must be even")])
    assert two.message == 'Pod "web" is invalid: [a: Required value, b: Invalid value: 3: must be even]'
