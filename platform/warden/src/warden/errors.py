"""The two ways an outside call fails, shared by the Kubernetes and Compute Engine adapters.

ApiError is any failed request: an HTTP status, or status 0 for a timeout, a
dropped connection or an unreadable reply, so callers treat them all alike
(count, back off, try again next round). LeaseLost is not an error of the
call: this process may no longer act, and the round must stop at once.
"""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(
            f"{method} {path}: HTTP {status}: {body[:200]}" if status else f"{method} {path}: {body[:200]}"
        )
        self.status = status


class LeaseLost(Exception):
    """Raised before a mutating request when this replica no longer holds a valid Lease."""


class ListExpired(ApiError):
    """A list's continue token expired between two of its pages (HTTP 410, reason Expired): list again from the start.

    The API server keeps a list's snapshot for a while only (etcd compaction, about 5 minutes); past it, the
    next page is refused ("Retrieving large results sets in chunks",
    https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks).
    """
