"""Label and field selectors: parsing the query-string syntax and matching objects.

Pure functions; the apiserver filters LIST and WATCH with them, controllers
match pods to their owners with them, and the CLI validates ``-l`` with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

Operator = Literal["=", "!=", "in", "notin", "exists", "!"]


class SelectorError(ValueError):
    """A selector string or structure that cannot be parsed."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = field(default_factory=frozenset)

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case "exists":
                return present
            case "!":
                return not present
            case "=":
                return present and labels[self.key] in self.values
            case "!=":
                return not present or labels[self.key] not in self.values
            case "in":
                return present and labels[self.key] in self.values
            case "notin":
                return not present or labels[self.key] not in self.values
        raise AssertionError(self.operator)

    def __str__(self) -> str:
        match self.operator:
            case "exists":
                return self.key
            case "!":
                return f"!{self.key}"
            case "=" | "!=":
                return f"{self.key}{self.operator}{next(iter(self.values))}"
            case _:
                return f"{self.key} {self.operator} ({','.join(sorted(self.values))})"


_TOKEN = re.compile(r"\s*(?:(?P<set>\((?P<members>[^)]*)\))|(?P<op>==|!=|=|!)|(?P<word>[^\s,=!()]+)|(?P<comma>,))")
_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_./]*)?[A-Za-z0-9]$")


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            raise SelectorError(f"unable to parse requirement: unexpected character at {text[position:]!r}")
        position = match.end()
        kind = match.lastgroup if match.lastgroup != "members" else "set"
        if match.group("set") is not None:
            tokens.append(("set", match.group("members")))
        else:
            assert kind is not None
            tokens.append((kind, match.group(kind)))
    return tokens


def _check_key(key: str) -> str:
    if not _KEY.match(key):
        raise SelectorError(f"invalid label key {key!r}")
    return key


@dataclass(frozen=True)
class LabelSelectorQuery:
    """A conjunction of requirements; the empty query matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelectorQuery:
        """Parse the ``labelSelector`` syntax: ``a=b,c!=d,e in (f,g),h notin (i),j,!k``."""
        if not text or not text.strip():
            return cls()
        tokens = _tokens(text)
        requirements: list[Requirement] = []
        index = 0

        def take() -> tuple[str, str]:
            nonlocal index
            if index >= len(tokens):
                raise SelectorError(f"unable to parse requirement: {text!r} ends early")
            index += 1
            return tokens[index - 1]

        while index < len(tokens):
            kind, value = take()
            if kind == "op" and value == "!":
                _, key = take()
                requirements.append(Requirement(_check_key(key), "!"))
            elif kind == "word":
                key = _check_key(value)
                if index >= len(tokens) or tokens[index][0] == "comma":
                    requirements.append(Requirement(key, "exists"))
                else:
                    op_kind, op = take()
                    if op_kind == "op" and op in ("=", "==", "!="):
                        value_kind, operand = take() if index < len(tokens) else ("word", "")
                        if value_kind == "comma":
                            index -= 1
                            operand = ""
                        elif value_kind != "word":
                            raise SelectorError(f"unable to parse requirement: bad value after {key}{op}")
                        requirements.append(Requirement(key, "!=" if op == "!=" else "=", frozenset([operand])))
                    elif op_kind == "word" and op in ("in", "notin"):
                        set_kind, members = take()
                        if set_kind != "set":
                            raise SelectorError(f"unable to parse requirement: {op} needs a (value, ...) set")
                        values = frozenset(m.strip() for m in members.split(",") if m.strip())
                        if not values:
                            raise SelectorError(f"unable to parse requirement: {key} {op} () needs a value")
                        requirements.append(Requirement(key, op, values))  # type: ignore[arg-type]
                    else:
                        raise SelectorError(f"unable to parse requirement: unknown operator {op!r} after {key}")
            else:
                raise SelectorError(f"unable to parse requirement: unexpected {value!r}")
            if index < len(tokens):
                comma_kind, _ = take()
                if comma_kind != "comma":
                    raise SelectorError("unable to parse requirement: expected ',' between requirements")
                if index >= len(tokens):
                    raise SelectorError("unable to parse requirement: trailing ','")
        return cls(tuple(requirements))

    @classmethod
    def from_label_selector(cls, selector: dict[str, Any] | None) -> LabelSelectorQuery:
        """Build from a ``LabelSelector`` structure (matchLabels / matchExpressions)."""
        requirements = list(cls.from_map((selector or {}).get("matchLabels")).requirements)
        for expression in (selector or {}).get("matchExpressions") or []:
            operator = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(
                expression.get("operator", "")
            )
            if operator is None:
                raise SelectorError(f"{expression.get('operator')!r} is not a valid label selector operator")
            values = frozenset(expression.get("values") or [])
            if operator in ("in", "notin") and not values:
                raise SelectorError(f"values: must be specified when operator is {expression['operator']}")
            requirements.append(Requirement(expression["key"], operator, values))  # type: ignore[arg-type]
        return cls(tuple(requirements))

    @classmethod
    def from_map(cls, labels: dict[str, str] | None) -> LabelSelectorQuery:
        """Build from a plain map selector, as Services and nodeSelector use."""
        return cls(tuple(Requirement(key, "=", frozenset([value])) for key, value in (labels or {}).items()))

    def matches(self, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        return all(requirement.matches(labels) for requirement in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)


FIELD_PATHS: dict[str, tuple[str, ...]] = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "spec.nodeName": ("spec", "nodeName"),
    "status.phase": ("status", "phase"),
    "involvedObject.name": ("involvedObject", "name"),
    "involvedObject.kind": ("involvedObject", "kind"),
    "involvedObject.namespace": ("involvedObject", "namespace"),
    "involvedObject.uid": ("involvedObject", "uid"),
    "spec.unschedulable": ("spec", "unschedulable"),
}


def _field_value(obj: dict[str, Any], path: tuple[str, ...]) -> str:
    value: Any = obj
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class FieldSelectorQuery:
    """``fieldSelector``: ``=``, ``==`` and ``!=`` on a fixed set of fields."""

    terms: tuple[tuple[str, bool, str], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> FieldSelectorQuery:
        if not text or not text.strip():
            return cls()
        terms = []
        for part in text.split(","):
            match = re.fullmatch(r"\s*([A-Za-z.]+)\s*(==|!=|=)\s*(.*?)\s*", part)
            if not match:
                raise SelectorError(f"invalid field selector term {part!r}")
            name, op, value = match.groups()
            if name not in FIELD_PATHS:
                raise SelectorError(
                    f'field label not supported: "{name}" (supported: {", ".join(sorted(FIELD_PATHS))})'
                )
            terms.append((name, op != "!=", value))
        return cls(tuple(terms))

    def matches(self, obj: dict[str, Any]) -> bool:
        return all((_field_value(obj, FIELD_PATHS[name]) == value) == equal for name, equal, value in self.terms)
