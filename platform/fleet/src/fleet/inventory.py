"""The written-down inventory format: facts a reviewer checks, as YAML with sorted keys.

tests/infra and tests/gitops compare what the stacks and the cluster trees hold with inventories
committed beside them (scripts/inventory.py writes them), so a change that alters a plan shows as a
diff of these files in the same commit. This module only fixes their form: stable, short, readable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

# Never folded: a long fact stays on its line, so a diff shows it whole.
WIDTH = 1000
# A list of plain values this short (as text) stays on one line: ranges, ports, zones read as one fact.
FLOW_WIDTH = 80


class _Dumper(yaml.SafeDumper):
    """Block mappings; short lists of plain values on one line."""


def _list(dumper: yaml.SafeDumper, values: list[Any]) -> yaml.Node:
    plain = all(isinstance(v, (str, int, float, bool)) or v is None for v in values)
    short = sum(len(str(v)) + 2 for v in values) <= FLOW_WIDTH
    return dumper.represent_sequence("tag:yaml.org,2002:seq", values, flow_style=plain and short)


_Dumper.add_representer(list, _list)


def dumps(facts: Mapping[str, Any], written_from: str) -> str:
    """The inventory file: a header naming its source and how to rewrite it, then the facts."""
    header = (
        f"# Inventory of {written_from}.\n"
        "# Written by `scripts/inventory.py --write`: a deliberate change rewrites it in the same commit, so the\n"
        "# review shows what the plan now holds. Do not edit by hand.\n"
    )
    body = yaml.dump(dict(facts), Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=WIDTH)
    return header + body
