"""The Xid table lives with preflight, which runs on the nodes; the fleet re-exports it."""

from contract.signals import BUCKETS, UNKNOWN_ACTION, Action, bucket_of, default_actions

__all__ = ["BUCKETS", "UNKNOWN_ACTION", "Action", "bucket_of", "default_actions"]
