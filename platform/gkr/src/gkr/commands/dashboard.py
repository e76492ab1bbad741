"""`gkr dashboard`: a running job's or cluster's Ray dashboard on localhost, through kubectl port-forward."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated

import typer

from contract.problem import Exit
from gkr import kube
from gkr.commands import common, options


def dashboard(
    ctx: typer.Context,
    name: str,
    kind: Annotated[str, typer.Option("--kind", help="rayjob or raycluster")] = "rayjob",
    port: Annotated[int, typer.Option("--port", help="local port")] = 8265,
) -> None:
    """Forward a running job's or cluster's Ray dashboard to localhost (kubectl port-forward; Ctrl-C stops)."""
    common.choose(kind, ("rayjob", "raycluster"), "--kind")
    found = kube.kubectl()
    if found is None:
        common.fail(["kubectl not found: install it (gcloud components install kubectl) or put it on PATH"])
    api, namespace, context_used = common.target(options.where(ctx))
    with common.api_errors(f"finding the Ray head of {kind} {name}"):
        try:
            service = kube.head_service(api, namespace, kind, name)
        except kube.NotReady as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(Exit.FAILED) from None
    print(f"Ray dashboard of {kind} {name}: http://localhost:{port} (Ctrl-C stops)", file=sys.stderr)
    raise SystemExit(run(kube.port_forward(str(found), context_used, namespace, service, port)))


def run(command: list[str]) -> int:
    """The port-forward in the foreground; Ctrl-C ends it as the user meant it to."""
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 0


command = options.typer_command("dashboard", dashboard, options.where_options())
