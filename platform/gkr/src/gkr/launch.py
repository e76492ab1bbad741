"""Applying a run across regions, all of it or nothing, and finding it again (the API calls go through gkr.kube).

Order: the run's certificates are minted (gkr/run_tls.py); the Lighthouse's TLS Secret, Deployment
and Service in the home cluster; then wait, bounded, for GKE to give the Service its internal load
balancer IP; then each region's members' TLS Secret and RayJob, with that address. When any step
fails, everything created so far is deleted again, newest first: no half-applied run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gkr import kube, lighthouse, run_tls
from gkr.multiregion import Run

WAIT_S = 300.0  # GKE usually provisions an internal load balancer within a minute or two
POLL_S = 5.0


class Failed(Exception):
    """A step of the submission failed; the message is one line and says what was rolled back."""


def wait_for_ip(api: Any, namespace: str, name: str, wait_s: float, poll_s: float) -> str:
    deadline = time.monotonic() + wait_s
    while True:
        ip = lighthouse.ingress_ip(kube.read_service(api, namespace, name))
        if ip:
            return ip
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"service {name} got no internal load balancer IP within {wait_s:g} s "
                f"(`kubectl describe service {name} -n {namespace}` shows GKE's events)"
            )
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def submit(
    run: Run,
    apis: dict[str, Any],
    say: Callable[[str], None],
    wait_s: float | None = None,
    poll_s: float | None = None,
) -> Run:
    """Apply the run (apis: region -> API client of its cluster); the run as applied, or Failed after rolling back."""
    run = run.with_identity(run_tls.mint(run.name))  # the CA's key ends here
    home_api = apis[run.home.region]
    created: list[tuple[str, Any, dict[str, Any]]] = []  # (region, api, object): what to delete on failure
    step = f"applying the Lighthouse in {run.home.region}"
    try:
        for obj in run.lighthouse:
            created.append((run.home.region, home_api, obj))  # before the call: a timed-out apply may have landed
            kube.apply(home_api, obj)
        service = next(o for o in run.lighthouse if o["kind"] == "Service")["metadata"]
        step = f"waiting for the Lighthouse's load balancer in {run.home.region}"
        host = wait_for_ip(
            home_api, service["namespace"], service["name"], wait_s or WAIT_S, POLL_S if poll_s is None else poll_s
        )
        say(f"lighthouse {service['name']} in {run.home.region}: {lighthouse.address(host)}")
        applied = run.with_host(host)
        for part in applied.parts:
            step = f"applying rayjob {run.name} in {part.region}"
            for obj in (part.secret, part.rayjob):
                created.append((part.region, apis[part.region], obj))
                kube.apply(apis[part.region], obj)
        return applied
    except Exception as exc:
        undone = rollback(created)
        raise Failed(f"{step} failed: {_first_line(exc)}; {undone}") from None


def rollback(created: list[tuple[str, Any, dict[str, Any]]]) -> str:
    """Delete what was created, newest first; what was (or could not be) deleted, in a few words."""
    deleted, left = [], []
    for region, api, obj in reversed(created):
        what = f"{obj['kind'].lower()} {obj['metadata']['name']} in {region}"
        try:
            if kube.delete_object(api, obj):
                deleted.append(what)
        except Exception as exc:
            left.append(f"{what} ({_first_line(exc)})")
    text = f"deleted {', '.join(deleted)}" if deleted else "nothing was created"
    if left:
        text += f"; could NOT delete {', '.join(left)}: run `gkr delete` again"
    return text


def find(apis: dict[str, Any], namespace: str, run: str, home: str) -> dict[str, list[dict[str, Any]] | str]:
    """region -> the run's objects there, or why the cluster did not answer (one region down must not hide the others)."""
    found: dict[str, list[dict[str, Any]] | str] = {}
    for region, api in apis.items():
        try:
            found[region] = kube.list_run(api, namespace, run, lighthouse=region == home)
        except Exception as exc:
            found[region] = f"unreachable: {kube.unreachable(exc)}"
    return found


def delete(apis: dict[str, Any], found: dict[str, list[dict[str, Any]] | str]) -> tuple[list[str], list[str]]:
    """Delete every object found; (what was deleted, what was not and why)."""
    deleted, failed = [], []
    for region, objects in found.items():
        if isinstance(objects, str):
            failed.append(f"{region}: {objects}")
            continue
        for obj in objects:
            what = f"{obj['kind'].lower()} {obj['metadata']['name']} in {region}"
            try:
                kube.delete_object(apis[region], obj)
                deleted.append(what)
            except Exception as exc:
                failed.append(f"{what}: {_first_line(exc)}")
    return deleted, failed
