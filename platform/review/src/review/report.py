"""The review as Markdown (for the pull request) and as a short terminal view."""

from __future__ import annotations

from collections import Counter

from review.capacity import Delta
from review.kubernetes import label
from review.review import Review
from review.terraform import StackDiff

ESTIMATE = (
    "Terraform changes are **estimated** from the synthesized configurations and the "
    "replacement-forcing attributes in `platform/review/src/review/replacement.yaml`; "
    "without a real `terraform plan` they can miss provider-side replacements."
)


def _value(v: object) -> str:
    text = "(none)" if v is None else str(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _counts(diff: StackDiff) -> str:
    counts = Counter(r.action for r in diff.resources)
    return ", ".join(f"{counts[a]} to {a}" for a in ("create", "update", "replace", "delete") if counts[a])


def _delta_rows(deltas: list[Delta]) -> list[str]:
    return [f"| {d.name} | {d.before:,} | {d.after:,} | {d.after - d.before:+,} |" for d in deltas]


def markdown(r: Review) -> str:
    out = [f"## Meridian plan review: {r.base} -> {r.head}", ""]
    destructive = r.destructive
    if destructive:
        out += [f"> [!CAUTION]\n> **DESTRUCTIVE: {len(destructive)} change(s) take capacity down**", ">"]
        out += [f"> - **{line}**" for line in destructive]
        out.append("")
    else:
        out += ["No destructive change.", ""]
    out += [f"_{note}_" for note in r.notes]
    out += [
        "### Capacity (GPUs)",
        "",
        "| region | before | after | change |",
        "|---|---:|---:|---:|",
        *_delta_rows(r.regions),
        "",
    ]
    out += ["| team quota | before | after | change |", "|---|---:|---:|---:|", *_delta_rows(r.teams), ""]
    out += ["### Terraform", ""]
    if any(d.source == "estimate" for d in r.stacks) or not r.stacks:
        out += [ESTIMATE, ""]
    if not r.stacks:
        out += ["No change in any stack.", ""]
    for diff in r.stacks:
        out += [f"#### {diff.stack}: {_counts(diff)} ({'from the plan' if diff.source == 'plan' else 'estimate'})", ""]
        for res in diff.resources:
            loud = f" — **DESTRUCTIVE: {res.destructive}**" if res.destructive else ""
            out.append(f"- `{res.action}` `{res.address}`{loud}")
            out += [f"  - `{c.path}`: `{_value(c.before)}` -> `{_value(c.after)}`" for c in res.changes[:20]]
            if len(res.changes) > 20:
                out.append(f"  - ... {len(res.changes) - 20} more attributes")
        out.append("")
    out += ["### Network access (who can reach what)", ""]
    out += [f"- {line}" for line in r.access] or ["No firewall rule changes."]
    out.append("")
    out += ["### Kubernetes (what Argo CD applies)", ""]
    if not r.clusters:
        out += ["No change in any cluster.", ""]
    for cluster in r.clusters:
        counts = Counter(o.action for o in cluster.objects)
        out += [
            f"#### {cluster.cluster}: "
            + ", ".join(f"{counts[a]} {a}" for a in ("added", "changed", "removed") if counts[a]),
            "",
        ]
        for o in cluster.objects:
            flags = "".join(f" — **{f}**" for f in o.flags)
            out.append(f"- {o.action} `{label(o.key)}`{flags}")
            if o.diff:
                out += [
                    "  <details><summary>diff</summary>",
                    "",
                    "  ```diff",
                    *(f"  {line}" for line in o.diff.splitlines()),
                    "  ```",
                    "  </details>",
                ]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def terminal(r: Review) -> str:
    out = [f"plan review: {r.base} -> {r.head}"]
    for d in r.regions:
        if d.before != d.after:
            out.append(f"  GPUs {d.name}: {d.before:,} -> {d.after:,}")
    for d in r.teams:
        if d.before != d.after:
            out.append(f"  quota {d.name}: {d.before:,} -> {d.after:,}")
    for diff in r.stacks:
        out.append(f"  terraform {diff.stack}: {_counts(diff)}")
    out += [f"  access {line}" for line in r.access]
    for cluster in r.clusters:
        counts = Counter(o.action for o in cluster.objects)
        out.append(
            f"  kubernetes {cluster.cluster}: "
            + ", ".join(f"{counts[a]} {a}" for a in ("added", "changed", "removed") if counts[a])
        )
        out += [f"    ! {f}" for o in cluster.flagged for f in o.flags]
    for line in r.destructive:
        out.append(f"  DESTRUCTIVE {line}")
    if len(out) == 1:
        out.append("  no change")
    return "\n".join(out) + "\n"
