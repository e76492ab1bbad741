"""GitOps generator: per-cluster Kustomize overlays and Argo CD applications from the fleet."""
