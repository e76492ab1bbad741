"""The review as Markdown (for the pull request) and as a short terminal view."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from contract.words import count, plural
from review.capacity import Delta
from review.kubernetes import ClusterDiff, label
from review.kubernetes import text as kubernetes_text
from review.review import Review
from review.terraform import StackDiff
from review.versions import VersionChange

ESTIMATE = (
    "Terraform changes are **estimated** from the synthesized configurations, the pinned provider's "
    "`ForceNew` attributes (`platform/review/src/review/provider_forcenew.json`) and the in-place updates "
    "that recreate or move a pool's nodes (`replacement.yaml`); without a real `terraform plan` they can "
    "miss a whole `ForceNew` block added or removed."
)


# GitHub refuses a comment body over 65,536 characters; the summary stays well under it.
COMMENT_LIMIT = 65_536
BUDGET = 60_000
LINE = 600  # one summary line at most: a longer one is cut, the full report has it whole


def _value(v: object) -> str:
    text = "(none)" if v is None else kubernetes_text(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _counts(diff: StackDiff) -> str:
    counts = Counter(r.action for r in diff.resources)
    return ", ".join(f"{counts[a]} to {a}" for a in ("create", "update", "replace", "delete") if counts[a])


def _delta_rows(deltas: list[Delta]) -> list[str]:
    return [f"| {d.name} | {d.before:,} | {d.after:,} | {d.after - d.before:+,} |" for d in deltas]


def _version_line(v: VersionChange) -> str:
    return f"- {v.line()}{' — **owner approves**' if v.approval else ''}"


def _pool_rows(r: Review) -> list[str]:
    rows = []
    for change in r.capacity.pools:
        old, new = change.before, change.after
        if old and new and (old.gpus, old.locations) == (new.gpus, new.locations):
            continue
        before = f"{old.size()} in {', '.join(old.locations)}" if old else "(none)"
        after = f"{new.size()} in {', '.join(new.locations)}" if new else "(none)"
        name = new.name if new else old.name if old else change.address
        rows.append(f"| {change.stack} | {name} | {before} | {after} |")
    return ["| region | pool | before | after |", "|---|---|---|---|", *rows] if rows else []


def markdown(r: Review) -> str:
    out = [f"## Meridian plan review: {r.base} -> {r.head}", "", _outcome(r), ""]
    out += _flagged(r)
    out += [f"_{note}_" for note in r.notes]
    out += ["### Versions", ""]
    out += [_version_line(v) for v in r.versions] or ["No version changes."]
    out.append("")
    out += _capacity(r)
    out += _terraform(r)
    out += ["### Network access (who can reach what)", ""]
    out += [f"- {line}" for line in r.access] or ["No firewall rule changes."]
    out.append("")
    out += _kubernetes(r)
    return "\n".join(out).rstrip() + "\n"


def _flagged(r: Review) -> list[str]:
    """What a reviewer must see first: the review's own machinery, destruction, widened access."""
    out: list[str] = []
    if r.machinery:
        out += ["> [!WARNING]", "> **The review's own machinery changes** (this review ran BASE's code, not these):"]
        out += [f"> - `{path}`" for path in r.machinery]
        out.append("")
    destructive = r.destructive
    if destructive:
        out += [
            f"> [!CAUTION]\n> **DESTRUCTIVE: {count(len(destructive), 'change')} {plural(len(destructive), 'takes', 'take')} capacity or data down**",
            ">",
        ]
        out += [f"> - **{line}**" for line in destructive]
        out.append("")
        out += _moved(r)
    else:
        out += ["No destructive change.", ""]
    if r.findings:
        out += ["### Security (widens access; a code owner must approve)", ""]
        out += [f"- {f.scope}: {f.what}" for f in r.findings]
        out.append("")
    return out


MOVED = "Why address ranges move, and how to keep them"


def _moved(r: Review) -> list[str]:
    return [f"### {MOVED}", "", *(f"- {line}" for line in r.moved_ranges), ""] if r.moved_ranges else []


def _capacity(r: Review) -> list[str]:
    return [
        "### Capacity (GPUs, from what Terraform will do)",
        "",
        "| region | before | after | change |",
        "|---|---:|---:|---:|",
        *_delta_rows(r.regions),
        "",
        *_pool_rows(r),
        "",
        "| team quota | before | after | change |",
        "|---|---:|---:|---:|",
        *_delta_rows(r.teams),
        "",
        *_queues(r),
        *_unallocated(r),
    ]


QUEUES = "team quota as rendered: the ClusterQueue's nominal GPUs"


def _queues(r: Review) -> list[str]:
    """What Argo CD gives Kueue, beside what the plan says (a disagreement is a security finding)."""
    if not r.queues:
        return []
    return [f"| {QUEUES} | before | after | change |", "|---|---:|---:|---:|", *_delta_rows(r.queues), ""]


UNALLOCATED = "unallocated: in no team's quota, lent to every team through Kueue's cohort"


def _unallocated(r: Review) -> list[str]:
    """GPUs no team's nominal quota covers, per region and pool: Kueue can use them, nobody is guaranteed them."""
    if not r.unallocated:
        return []
    return [f"| {UNALLOCATED} | before | after | change |", "|---|---:|---:|---:|", *_delta_rows(r.unallocated), ""]


def _terraform(r: Review) -> list[str]:
    out = ["### Terraform", ""]
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
    return out


def _kubernetes(r: Review) -> list[str]:
    """Each cluster's changed objects; a change made alike in several clusters (the registry ConfigMap) is
    shown in full once, and named as the same change elsewhere."""
    out = ["### Kubernetes (what Argo CD applies)", ""]
    if not r.clusters:
        out += ["No change in any cluster.", ""]
    first: dict[tuple[object, ...], str] = {}
    for cluster in r.clusters:
        out += [f"#### {cluster.cluster}: {_object_counts(cluster)}", ""]
        for o in cluster.objects:
            flags = "".join(f" — **{f}**" for f in o.flags)
            same = (o.key, o.action, o.diff, tuple(o.changes))
            if (o.diff or o.changes) and same in first:
                out.append(f"- {o.action} `{label(o.key)}`{flags}: the same change as in {first[same]}")
                continue
            first.setdefault(same, cluster.cluster)
            out.append(f"- {o.action} `{label(o.key)}`{flags}")
            out += [f"  - `{line.split(': ', 1)[0]}`: {line.split(': ', 1)[1]}" for line in o.changes]
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
    return out


def _object_counts(cluster: ClusterDiff) -> str:
    counts = Counter(o.action for o in cluster.objects)
    return ", ".join(f"{counts[a]} {a}" for a in ("added", "changed", "removed") if counts[a])


def terminal(r: Review) -> str:
    out = [f"plan review: {r.base} -> {r.head}"]
    for d in r.regions:
        if d.before != d.after:
            out.append(f"  GPUs {d.name}: {d.before:,} -> {d.after:,}")
    for d in r.teams:
        if d.before != d.after:
            out.append(f"  quota {d.name}: {d.before:,} -> {d.after:,}")
    out += [f"  rendered quota {d.name}: {d.before:,} -> {d.after:,}" for d in r.queues if d.before != d.after]
    out += [f"  unallocated GPUs {d.name}: {d.before:,} -> {d.after:,}" for d in r.unallocated if d.before != d.after]
    for diff in r.stacks:
        out.append(f"  terraform {diff.stack}: {_counts(diff)}")
    out += [f"  access {line}" for line in r.access]
    for cluster in r.clusters:
        out.append(f"  kubernetes {cluster.cluster}: {_object_counts(cluster)}")
        out += [f"    ! {f}" for o in cluster.flagged for f in o.flags]
    out += [f"  MACHINERY {path} (this review ran BASE's code)" for path in r.machinery]
    out += [f"  SECURITY {line}" for line in r.security]
    out += [f"  UPGRADE {line}" for line in r.upgrades]
    out += [f"  DESTRUCTIVE {line}" for line in r.destructive]
    out += [f"  MOVED {line}" for line in r.moved_ranges]
    if len(out) == 1:
        out.append("  no change")
    return "\n".join(out) + "\n"


def _outcome(r: Review) -> str:
    words = {3: "DESTRUCTIVE", 4: "a code owner must approve", 0: "nothing flagged"}
    labels = ", ".join(r.labels) or "none"
    return f"**Outcome: {words[int(r.exit_code)]}** (exit {int(r.exit_code)}; labels: {labels})"


def _changed_table(heading: str, deltas: list[Delta]) -> list[str]:
    rows = _delta_rows([d for d in deltas if d.before != d.after])
    return [f"| {heading} | before | after | change |", "|---|---:|---:|---:|", *rows] if rows else []


def _sections(r: Review) -> Iterable[tuple[str, list[str]]]:
    """What the comment shows, most important first."""
    yield (
        "Review machinery changed: this review ran BASE's code, not the pull request's",
        [f"- `{path}`" for path in r.machinery],
    )
    yield "Destructive", [f"- **{line}**" for line in r.destructive]
    yield MOVED, [f"- {line}" for line in r.moved_ranges]
    yield "Security (widens access; a code owner must approve)", [f"- {line}" for line in r.security]
    yield "Versions", [_version_line(v) for v in r.versions]
    yield "Capacity (GPUs)", _changed_table("region", r.regions)
    planned, rendered = _changed_table("team quota", r.teams), _changed_table(QUEUES, r.queues)
    yield "Team quotas (GPUs)", planned + ([""] if planned and rendered else []) + rendered
    yield (
        "Unallocated GPUs (Kueue lends them through the cohort; no team is guaranteed them)",
        _changed_table("region pool", r.unallocated),
    )
    counts = [f"- terraform `{d.stack}`: {_counts(d)}" for d in r.stacks]
    counts += [f"- kubernetes `{cluster.cluster}`: {_object_counts(cluster)}" for cluster in r.clusters]
    yield "Changes per region and cluster", counts


def summary(r: Review, report_url: str = "", budget: int = BUDGET) -> str:
    """The pull request comment: within GitHub's limit, flagged lines first; the full report is linked."""
    where = f"[the full report]({report_url})" if report_url else "the full report (`review.md`)"
    head = [f"## Meridian plan review: {r.base} -> {r.head}", "", _outcome(r), "", f"Everything is in {where}.", ""]
    head += [f"_{note}_" for note in r.notes]
    out, used = head, sum(len(line) + 1 for line in head)
    for title, lines in _sections(r):
        if not lines:
            continue
        block = ["", f"### {title}", ""]
        used += sum(len(line) + 1 for line in block)
        out += block
        for shown, line in enumerate(lines):
            line = line if len(line) <= LINE else line[: LINE - 3] + "..."
            if used + len(line) + 1 > budget - 200:  # room for the "more" line of each section still to come
                more = f"- ... {len(lines) - shown:,} more in {where}"
                out.append(more)
                used += len(more) + 1
                break
            out.append(line)
            used += len(line) + 1
    if not r.labels:
        out += ["", "No destructive change, nothing for a code owner."]
    return "\n".join(out).rstrip() + "\n"
