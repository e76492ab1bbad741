"""Destructive lines folded where one clause repeats.

Removing a region replaces its eight RDMA subnetworks with one clause each ("and with it the cluster
in europe-west1: 454 nodes, 3,072 GPUs" eight times); removing a team deletes its namespace in every
cluster. A reviewer reads each fact once: the same deletion of several objects of one kind in one
scope is one line naming them, and the same line in several scopes is one line naming the scopes.
"""

from __future__ import annotations

import re

from contract.words import count

_OBJECT = re.compile(
    r"^(?P<scope>[^:]+): (?P<verb>replaces|deletes) "
    r"(?P<kind>node pool|managed folder|subnetwork|network|cluster|bucket) (?P<name>\S+?)(?P<rest>(?:,? ).*)?$"
)
_NAMESPACE = re.compile(r"^(?P<scope>[^:]+): namespace (?P<name>\S+) is deleted, and everything in it$")


def _by_kind(lines: list[str]) -> list[str]:
    """Objects of one kind, one verb and one consequence in one scope: one line naming them."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for line in lines:
        key: tuple[str, ...]
        if m := _OBJECT.match(line):
            key = (m["scope"], m["verb"], m["kind"], m["rest"] or "")
        elif m := _NAMESPACE.match(line):
            key = (m["scope"], "namespace")
        else:
            key = (line,)
        groups.setdefault(key, []).append(m["name"] if m else line)
    out = []
    for key, names in groups.items():
        if len(key) == 1 or len(names) == 1:
            out += [key[0]] if len(key) == 1 else [_one(key, names[0])]
        elif key[1] == "namespace":
            out.append(
                f"{key[0]}: {count(len(names), 'namespace')} ({', '.join(names)}) are deleted, and everything in them"
            )
        else:
            scope, verb, kind, rest = key
            rest = rest.replace(", and with it ", ", and with them ")
            out.append(f"{scope}: {verb} {count(len(names), kind)} ({', '.join(names)}){rest}")
    return out


def _one(key: tuple[str, ...], name: str) -> str:
    if key[1] == "namespace":
        return f"{key[0]}: namespace {name} is deleted, and everything in it"
    scope, verb, kind, rest = key
    return f"{scope}: {verb} {kind} {name}{rest}"


def fold(lines: list[str]) -> list[str]:
    """`lines` ("scope: what"), each fact once: per scope by kind, then the same fact across scopes."""
    scopes: dict[str, list[str]] = {}
    for line in _by_kind(lines):
        scope, sep, what = line.partition(": ")
        scopes.setdefault(what if sep else line, []).append(scope if sep else "")
    return [f"{', '.join(s)}: {what}" if s[0] else what for what, s in scopes.items()]
