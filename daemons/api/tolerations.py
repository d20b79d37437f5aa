"""Taints and tolerations: Kubernetes' matching rule, shared by the scheduler and the node lifecycle controller."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """Kubernetes' matching: the effect (if given) and key (if given) agree, then Exists, or Equal on the value."""
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")
