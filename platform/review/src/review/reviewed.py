"""The chain from review to deploy: each stack's reviewed plan by digest, and what was deployed.

The decision writes a record (`meridian-review --reviewed reviewed.json`) of
the commit it reviewed and the sha256 of every stack it saw on that side, in
canonical JSON (sorted keys, no spaces, UTF-8): the same digest whether the
stack came from a plan document or a synthesized `cdk.tf.json`. The deploy
(review.deploy, run by `scripts/cdktn deploy STACK`) synthesizes the stack
again, compares its digest with the record and applies only a match. After a
successful apply it records the applied stack (`<stack>.tf.json`) where the
next review reads it (`meridian-review --deployed DIR`), so a review compares
with what is deployed, not only with the base branch's synthesis.

Records are read as hostile input (another workflow's artifact, a bucket
object): bounded size, the exact shape, one line when either is wrong.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from contract.names import is_dns1035_label

FORMAT = "meridian-reviewed/1"
MAX_RECORD_BYTES = 1024 * 1024  # a record is a few hundred bytes a stack
MAX_STACK_BYTES = 64 * 1024 * 1024  # as a side document (side.py)
_DIGEST = re.compile(r"[0-9a-f]{64}")


class RecordError(Exception):
    """A record or a deployed stack cannot be used; the message says where and what to do."""


def canonical(stack: dict[str, Any]) -> bytes:
    return json.dumps(stack, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(stack: dict[str, Any]) -> str:
    """sha256 of a stack's canonical JSON."""
    return hashlib.sha256(canonical(stack)).hexdigest()


def record(head: str, outcome: int, stacks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the decision records: the reviewed commit, its outcome and each stack's digest."""
    return {
        "format": FORMAT,
        "head": head,
        "exit": outcome,
        "stacks": {s: digest(b) for s, b in sorted(stacks.items())},
    }


def _read(path: Path, limit: int, what: str) -> Any:
    try:
        size = path.stat().st_size
        if size > limit:
            raise RecordError(f"{path}: {size:,} bytes, over the {limit:,} a {what} may have")
        return json.loads(path.read_bytes())
    except OSError as exc:
        raise RecordError(f"{path}: cannot read the {what}: {exc.strerror}") from None
    except (ValueError, RecursionError):
        raise RecordError(f"{path}: not JSON: not a {what}") from None


def load(path: Path) -> dict[str, str]:
    """The reviewed digests of a record: stack -> sha256. RecordError when the record is not one."""
    data = _read(path, MAX_RECORD_BYTES, "reviewed-plan record")
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("stacks"), dict):
        raise RecordError(f"{path}: not a {FORMAT} record (written by `meridian-review --reviewed`)")
    stacks = data["stacks"]
    for stack, value in stacks.items():
        if not is_dns1035_label(str(stack)) or not isinstance(value, str) or not _DIGEST.fullmatch(value):
            raise RecordError(f"{path}: stacks.{str(stack)[:64]}: not a stack name with a sha256 digest")
    return dict(stacks)


def deployed_stacks(folder: Path) -> dict[str, dict[str, Any]]:
    """What the deploys left in `folder` (`<stack>.tf.json`, as review.deploy writes them)."""
    if not folder.is_dir():
        raise RecordError(f"{folder}: no such folder of deployed stacks (<stack>.tf.json)")
    out = {}
    for path in sorted(folder.glob("*.tf.json")):
        stack = path.name.removesuffix(".tf.json")
        body = _read(path, MAX_STACK_BYTES, "deployed stack")
        if not is_dns1035_label(stack) or not isinstance(body, dict):
            raise RecordError(f"{path}: not a deployed stack (a stack name and its Terraform JSON object)")
        out[stack] = body
    return out
