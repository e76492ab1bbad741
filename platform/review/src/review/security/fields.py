"""Two versions of a Kubernetes object compared field by field, for the default deny (objects.py).

List items pair by name (a container's port by its port, as Kubernetes' merge keys do), documents held
in strings (a ConfigMap's JSON, an Argo CD kustomize patch) are parsed, at most EMBEDDED deep, with the
one bounded YAML loader: the strings are hostile. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import safeyaml

Path = tuple[str, ...]  # keys, and list items as "[name]" (or "[index]" for items without a name)


class Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING: Any = Missing()  # a field one side does not have (null, {} and [] alike: Kubernetes reads them so)

# --- Field by field -------------------------------------------------------------------------------

_DOCUMENT = safeyaml.Limits(max_bytes=256 * 1024, max_depth=32, max_aliases=0, max_nodes=20_000)


def document(value: Any) -> Any:
    """A string holding a YAML or JSON mapping (a ConfigMap's config.json, a kustomize patch, Kueue's
    manager configuration), parsed; any other value as it is. Bounded: the string is hostile. One line is
    a document only as a JSON object: "a: b" or "true" is a value."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if "\n" not in text and not (text.startswith("{") and text.endswith("}")):
        return value
    try:
        parsed = safeyaml.load(value, _DOCUMENT)
    except safeyaml.YamlError:
        return value
    return parsed if isinstance(parsed, dict) else value


def item_key(item: Any) -> str | None:
    """What names a list item: its name (a RayCluster's worker group: its groupName), or for a container's
    port without one the port, as Kubernetes' own merge keys do (strategic merge patch)."""
    if isinstance(item, dict):
        name = item.get("name", item.get("groupName"))
        if name is None and isinstance(item.get("containerPort"), int):
            return f"{item['containerPort']}/{item.get('protocol', 'TCP')}"
        return name if isinstance(name, str) else None
    return None


def by_name(items: list[Any]) -> dict[str, Any] | None:
    keys = [item_key(i) for i in items]
    if not items or None in keys or len(set(keys)) != len(keys):
        return None
    return dict(zip(keys, items, strict=True))  # type: ignore[arg-type]


def _absent(value: Any) -> bool:
    return value is MISSING or value is None or value in ({}, [])


@dataclass(frozen=True)
class Change:
    path: Path
    before: Any  # MISSING where that side has none
    after: Any
    item: Path | None = None  # the list item, when one side has none of it (a new container, say)


def _flat(item: Any) -> bool:
    """A mapping of scalars and lists of scalars: compared whole, as one item (a toleration, a whitelist entry)."""
    return isinstance(item, dict) and all(
        not isinstance(v, dict | list) or (isinstance(v, list) and not any(isinstance(x, dict | list) for x in v))
        for v in item.values()
    )


def _pairs(a: list[Any], b: list[Any]) -> list[tuple[str, Any, Any]] | None:
    """How two lists' items pair up, as (path segment, old item, new item); None: compare the lists whole."""
    named_a, named_b = (by_name(x) if x else {} for x in (a, b))
    if named_a is not None and named_b is not None:
        keys = dict.fromkeys([*named_b, *named_a])
        return [(f"[{k}]", named_a.get(k, MISSING), named_b.get(k, MISSING)) for k in keys]
    if all(not isinstance(i, dict | list) for i in [*a, *b]) and len(a) == len(b):
        return [(f"[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b, strict=True))]  # args: item by item
    if all(not isinstance(i, dict | list) or _flat(i) for i in [*a, *b]):
        return None
    gone = [(i, x) for i, x in enumerate(a) if x not in b]
    came = [(j, y) for j, y in enumerate(b) if y not in a]
    return [
        (
            f"[{came[n][0] if n < len(came) else gone[n][0]}]",
            gone[n][1] if n < len(gone) else MISSING,
            came[n][1] if n < len(came) else MISSING,
        )
        for n in range(max(len(gone), len(came)))
    ]


EMBEDDED = 2  # documents parsed out of strings, one inside another, at most: the strings are hostile


def changes(old: Any, new: Any, path: Path = (), item: Path | None = None, embedded: int = 0) -> Iterator[Change]:
    """Each changed leaf. A leaf is a scalar, a string that is no document, or a list of scalars or of flat
    mappings compared whole (as sets, unless both sides have as many scalars: then item by item). Lists of
    named items pair by name; other lists of mappings drop the items both sides hold and pair the rest in
    order. `item`: the list item above that one side has none of."""
    old, new = (MISSING if _absent(v) else v for v in (old, new))
    if embedded < EMBEDDED and (isinstance(old, str) or isinstance(new, str)):
        parsed = document(old), document(new)
        embedded += parsed != (old, new)
        old, new = parsed
    if old == new and type(old) is type(new):
        return
    if isinstance(old, dict | Missing) and isinstance(new, dict | Missing):
        a, b = old if isinstance(old, dict) else {}, new if isinstance(new, dict) else {}
        for k in dict.fromkeys([*b, *a]):
            yield from changes(a.get(k, MISSING), b.get(k, MISSING), (*path, str(k)), item, embedded)
        return
    pairs = (
        _pairs(old if isinstance(old, list) else [], new if isinstance(new, list) else [])
        if isinstance(old, list | Missing) and isinstance(new, list | Missing)
        else None
    )
    if pairs is None:
        yield Change(path, old, new, item)
        return
    for segment, x, y in pairs:
        here = (*path, segment)
        yield from changes(x, y, here, item or (here if _absent(x) or _absent(y) else None), embedded)
