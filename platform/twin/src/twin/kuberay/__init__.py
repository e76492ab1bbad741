"""The pods KubeRay v1.7.0 makes of a RayCluster or a RayJob, built here because no operator runs in the twin.

Read (not copied) from github.com/ray-project/kuberay at 59d663aeec13760646da3db9c1cf8cfe883e30b7, the
commit tag v1.7.0 names and the one the fleet pins (fleet/upstream.py KUBERAY). Each module cites the
functions it follows: `start` (the `ray start` line), `pod` (head and worker pods), `cluster` (a
RayCluster, its pods and head Service), `job` (a RayJob: its RayCluster, submitter Job and pod).

Pure: plain dicts in, plain dicts out, no I/O. What it is not: the operator's reconciliation. A pod
that dies is recreated by the twin's runner, not here; names whose suffix is random upstream
(pods, the RayJob's cluster and submission id) get a suffix derived from what they name instead.
"""

from twin.kuberay.cluster import ClusterPods, cluster_pods
from twin.kuberay.job import JobPods, rayjob_pods
from twin.kuberay.spec import KubeRayError, Rejected, Unsupported

KUBERAY_COMMIT = "59d663aeec13760646da3db9c1cf8cfe883e30b7"  # tag v1.7.0

__all__ = [
    "KUBERAY_COMMIT",
    "ClusterPods",
    "JobPods",
    "KubeRayError",
    "Rejected",
    "Unsupported",
    "cluster_pods",
    "rayjob_pods",
]
