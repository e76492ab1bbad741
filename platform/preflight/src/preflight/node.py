"""Annotate the Node with a failing check, through the Kubernetes API (contract.incluster)."""

from __future__ import annotations

from urllib.parse import quote

from contract import incluster


def annotate(cluster: incluster.Cluster, node: str, annotations: dict[str, str], timeout: float = 10) -> None:
    """Merge-patch the Node's annotations; incluster.ApiError (one line) when the API server says no."""
    incluster.request(
        cluster,
        "PATCH",
        f"/api/v1/nodes/{quote(node, safe='')}",
        {"metadata": {"annotations": annotations}},
        content_type=incluster.MERGE_PATCH,
        timeout=timeout,
    )
