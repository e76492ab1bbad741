"""The cluster twin: what Meridian ships, run for real on one machine without a GPU or a cluster.

- `images`: every Dockerfile of the project built as a CPU twin (its base image a build argument);
- `pods`: a rendered pod spec read as the kubelet reads it (pure);
- `kuberay`: the pods KubeRay makes of a RayCluster or RayJob (pure);
- `kubelet`: those pods run with podman, each in its own network namespace.
"""
