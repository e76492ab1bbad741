"""What a change does to who may do what: every change that widens access, one line each.

A pod that turns privileged with the host's root filesystem mounted is, in the object
diff, "changed" like any other; here it is a finding. Both sides' objects are read as
grants (what a pod may touch on its node, what a role allows, what admission checks,
what traffic a NetworkPolicy admits, what a firewall rule or an IAM binding lets
through) and only what the new side grants beyond the old one is reported: narrowing
and unchanged objects say nothing, added objects count in full, and removing a
protection (a deny rule, a NetworkPolicy, `allowPrivilegeEscalation: false`) counts
as widening. Admission configuration is reported on any change, since which way a
changed selector or CEL expression cuts cannot be read off the objects. Team quotas and
priorities are compared with the fleet plan (quotas.py). Default deny: any other change to a
Kubernetes object (objects.py) or a stack (default_deny.py) that the review does not know to
be harmless is listed too.
Pure: objects, stacks and plans in, findings out.
"""

from __future__ import annotations

from typing import Any

from review.access import Stacks, range_names
from review.kubernetes import Clusters
from review.security.admission import ADMISSION, config_changes
from review.security.clusters import cluster_findings
from review.security.common import Finding
from review.security.default_deny import unknown_changes
from review.security.pods import pod_specs, pod_widening
from review.security.quotas import cluster_plans
from review.security.stacks import firewall_widening, iam_grants, iam_widening

__all__ = [
    "ADMISSION",
    "Finding",
    "cluster_findings",
    "config_changes",
    "iam_grants",
    "pod_specs",
    "pod_widening",
    "security_findings",
]

# --- Everything -----------------------------------------------------------------------------------


def security_findings(
    before_clusters: Clusters,
    after_clusters: Clusters,
    before_stacks: Stacks,
    after_stacks: Stacks,
    before_plan: Any = None,
    after_plan: Any = None,
) -> list[Finding]:
    """Every change that widens access, per cluster (HEAD's clusters) then per stack (HEAD's stacks).
    The plans (`meridian plan --json` of each side; hostile, read by quotas.py) explain quota changes.

    A cluster or stack that HEAD removes takes its grants with it: nothing to flag there.
    """
    names, old_names = range_names(after_stacks, before_stacks), range_names(before_stacks, after_stacks)
    was, now = cluster_plans(before_plan), cluster_plans(after_plan)
    out = []
    for cluster, objects in after_clusters.items():
        plans = (was.get(cluster), now.get(cluster))
        out += cluster_findings(cluster, before_clusters.get(cluster, []), objects, names, plans)
    for stack, body in after_stacks.items():
        old = before_stacks.get(stack, {})
        widened = [*firewall_widening(old, body, names, old_names), *iam_widening(old, body)]
        out += [Finding(stack, line) for line in [*widened, *unknown_changes(old, body)]]
    return out
