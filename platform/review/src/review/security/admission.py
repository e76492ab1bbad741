"""Webhooks and admission policies: any change, naming what changed."""

from __future__ import annotations

import json
from typing import Any

from review.kubernetes import Obj
from review.security.common import dicts

# --- Admission ------------------------------------------------------------------------------------

ADMISSION = (
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
)


def _scalar(value: Any) -> bool:
    return not isinstance(value, dict | list) or (
        isinstance(value, list) and all(not isinstance(v, dict | list) for v in value)
    )


def _show(value: Any) -> str:
    return "(none)" if value is None else ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _brief(item: Any) -> str:
    if isinstance(item, dict):
        text = str(
            item.get("message") or item.get("expression") or item.get("name") or json.dumps(item, sort_keys=True)
        )
    else:
        text = str(item)
    return text if len(text) <= 80 else text[:77] + "..."


def _by_name(items: list[Obj]) -> dict[str, Obj] | None:
    names = [i.get("name") for i in items]
    return (
        {str(n): i for n, i in zip(names, items, strict=True)} if all(names) and len(set(names)) == len(names) else None
    )


def config_changes(old: Any, new: Any, path: str = "") -> list[str]:
    """Each changed setting named by its path: scalars as old -> new, named list items one by one,
    other lists by the items removed and added (validations, rules)."""
    if old == new:
        return []
    if isinstance(old, dict | None) and isinstance(new, dict | None):
        old, new = old or {}, new or {}
        return [
            c
            for k in sorted(set(old) | set(new), key=str)
            for c in config_changes(old.get(k), new.get(k), f"{path}.{k}".lstrip("."))
        ]
    if _scalar(old) and _scalar(new):
        return [f"{path} {_show(old)} -> {_show(new)}"]
    if isinstance(old, list | None) and isinstance(new, list | None):
        was, now = dicts(old), dicts(new)
        old_named, new_named = _by_name(was), _by_name(now)
        if old_named is not None and new_named is not None:
            return [
                c
                for n in [*new_named, *(n for n in old_named if n not in new_named)]
                for c in (
                    [f"{path} {n} removed"]
                    if n not in new_named
                    else [f"{path} {n} added"]
                    if n not in old_named
                    else config_changes(old_named[n], new_named[n], f"{path}[{n}]")
                )
            ]
        return [f"{path} removed: {_brief(i)}" for i in was if i not in now] + [
            f"{path} added: {_brief(i)}" for i in now if i not in was
        ]
    return [f"{path} changes"]


def admission_findings(old: Obj | None, new: Obj | None) -> list[str]:
    if old is None:
        return ["added: it changes what the cluster admits"]
    if new is None:
        return ["removed: what it checked is no longer checked"]
    return config_changes(old.get("spec"), new.get("spec")) + config_changes(
        old.get("webhooks"), new.get("webhooks"), "webhooks"
    )
