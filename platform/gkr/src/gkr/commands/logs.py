"""`gkr logs`: a job's pod logs, each line prefixed with its pod; for a run across regions, with its region too."""

from __future__ import annotations

import sys
import threading
from typing import Annotated, Any

import typer

from gkr import kube, lighthouse, views
from gkr.commands import common, options


def logs(
    ctx: typer.Context,
    name: str,
    role: Annotated[str, typer.Option("--role", help="head, worker or all")] = "head",
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
) -> None:
    """Logs of a job's head, workers or all pods."""
    common.choose(role, kube.ROLE_SELECTORS, "--role")
    at = options.where(ctx)
    api, namespace, _ = common.target(at)
    with common.api_errors(f"finding the pods of {name}"):
        found = kube.pod_metadata(api, namespace, name, role)
    run = next((r for r in (lighthouse.run_of({"metadata": m}) for m in found.values()) if r), None)
    apis: dict[str, Any] = {"": api}
    if run is not None:  # a run across regions: every region's pods, each line prefixed with its region
        apis, why = common.run_clients(at.registry, run[1])
        for region_name, reason in why.items():
            print(f"{region_name}: {reason}", file=sys.stderr)
    pods: dict[str, list[str]] = {}
    for where, client in apis.items():
        with common.api_errors(f"finding the pods of {name}{f' in {where}' if where else ''}"):
            pods[where] = sorted(found) if client is api and not where else kube.pods(client, namespace, name, role)
    if not any(pods.values()):
        common.fail([f"no {role} pods for {name} in {namespace} (yet)"])
    if follow:
        _follow(apis, namespace, pods)
        return
    for where, names in pods.items():
        for pod in names:
            text = str(kube.log(apis[where], namespace, pod, False))
            sys.stdout.write(views.prefixed(_label(where, pod), text))


def _label(where: str, pod: str) -> str:
    return f"{where}/{pod}" if where else pod


def _follow(apis: dict[str, Any], namespace: str, pods: dict[str, list[str]]) -> None:
    """Every pod at once, a thread per cluster; lines never interleave mid-line."""
    lock = threading.Lock()

    def follower(where: str) -> threading.Thread:
        def write(pod: str, line: str) -> None:
            with lock:
                sys.stdout.write(f"[{_label(where, pod)}] {line}\n")
                sys.stdout.flush()

        return threading.Thread(target=kube.follow_logs, args=(apis[where], namespace, pods[where], write), daemon=True)

    threads = [follower(where) for where in pods if pods[where]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


command = options.typer_command("logs", logs, options.where_options())
