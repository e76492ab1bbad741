"""What the synthesized stacks create, read back from their Terraform JSON."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from fleet.catalog import MACHINE_TYPES

Stacks = dict[str, dict[str, Any]]  # stack name -> its cdk.tf.json


@dataclass(frozen=True)
class StackSummary:
    name: str
    resources: Counter[str]  # Terraform type -> count
    nodes: int  # GPU nodes at full size
    gpus: Counter[str]  # accelerator type -> count


def resources(stack: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(type, name, body) of every resource in a stack."""
    return [(kind, name, body) for kind, items in stack.get("resource", {}).items() for name, body in items.items()]


def pool_capacity(body: dict[str, Any]) -> tuple[int, int, str]:
    """Nodes, GPUs and GPU type a node pool holds at full size: node_count per zone, or the
    autoscaling maximum (total, or per zone).

    `body` is the pool as synthesized JSON has it (nested blocks as objects) or as a
    `terraform show -json` plan has it (nested blocks as one-item lists); the plan
    review reads both sides of a change with it.
    """
    autoscaling = body.get("autoscaling")
    if isinstance(autoscaling, list):
        autoscaling = autoscaling[0] if autoscaling else None
    zones = max(1, len(body.get("node_locations") or []))
    if autoscaling and autoscaling.get("total_max_node_count"):
        nodes = int(autoscaling["total_max_node_count"])
    elif autoscaling and autoscaling.get("max_node_count"):  # per-zone limits (the shipped pools use totals)
        nodes = int(autoscaling["max_node_count"]) * zones
    else:
        nodes = int(body.get("node_count") or 0) * zones
    config = body.get("node_config") or {}
    if isinstance(config, list):
        config = config[0] if config else {}
    accelerators = config.get("guest_accelerator") or []
    gpus = sum(int(a.get("count", 0)) for a in accelerators) * nodes
    gpu_type = accelerators[0].get("type", "") if accelerators else ""
    if not accelerators and config.get("machine_type") in MACHINE_TYPES:
        machine = MACHINE_TYPES[config["machine_type"]]
        gpus, gpu_type = machine.gpus * nodes, machine.gpu_type or ""
    return nodes, gpus, gpu_type


def summarize(name: str, stack: dict[str, Any]) -> StackSummary:
    kinds: Counter[str] = Counter()
    nodes = 0
    gpus: Counter[str] = Counter()
    for kind, _, body in resources(stack):
        kinds[kind] += 1
        if kind != "google_container_node_pool":
            continue
        accelerators = body.get("node_config", {}).get("guest_accelerator", [])
        if accelerators:
            count = pool_capacity(body)[0]
            nodes += count
            for accelerator in accelerators:
                gpus[accelerator["type"]] += int(accelerator["count"]) * count
    return StackSummary(name, kinds, nodes, gpus)


def render(stacks: Stacks, where: str) -> str:
    lines = [f"Stacks ({where}/stacks/<stack>/cdk.tf.json)"]
    for name in stacks:
        s = summarize(name, stacks[name])
        capacity = ""
        if s.nodes:
            mix = ", ".join(f"{n:,} x {t}" for t, n in sorted(s.gpus.items()))
            capacity = f", {s.nodes:,} GPU nodes, {sum(s.gpus.values()):,} GPUs ({mix})"
        lines.append(f"{name}: {sum(s.resources.values())} resources{capacity}")
        lines.append("  " + ", ".join(f"{kind} {count}" for kind, count in sorted(s.resources.items())))
    return "\n".join(lines) + "\n"
