"""The controllers' rules: what Kueue (and KubeRay, where Kueue reads it) do with the objects Meridian renders.

Each rule was read from the upstream sources at the versions in `versions.READ_AT` and cites the file, line
(`sources.RULES`) and function it follows there (and the upstream test that pins the behaviour, where there is
one). The rules are plain functions over Kubernetes object dicts, with no I/O: the tests run them over the
committed tree joined with every gkr example (tests/controllers).

- `versions.py`: the version of each release the rules were read at; fleet.rules refuses another.
- `sources.py`: where each rule (and each upstream behaviour the fleet relies on) was read, file and line.
- `pods.py`: quantities, and a pod's requests as Kueue counts them (LimitRange defaults, limits).
- `podsets.py`: the Workload Kueue makes of a Job, RayJob, RayCluster, Deployment or Pod.
- `refusals.py`: what Kueue's webhooks refuse at creation.
- `gates.py`: the feature gates Meridian relies on, and what stops the manager.
- `kueue.py`: one cluster's Kueue objects and manager config; which flavors admit a PodSet; the findings.
- `findings.py`: a finding (where, which rule, what to do).

A rule that cannot be checked here (a running Kueue, real nodes) is said so where it is written: these
rules say what Kueue can never do with an object (admit it, enforce its pool), not that it will.
"""
