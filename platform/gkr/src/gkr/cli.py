"""gkr: submit and inspect training jobs on the Meridian fleet.

Exit codes: 0 done, 1 the cluster said no (API error), 2 bad input (one line
per problem, nothing applied).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup


class _Commands(TyperGroup):
    """Help without `[default: None]`: an option left unset means "resolved from the fleet", as its help says."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        for param in command.params if command is not None else ():
            if param.default is None and isinstance(param, click.Option | click.Argument):
                param.show_default = False  # type: ignore[union-attr]
        return command


app = typer.Typer(
    cls=_Commands, add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False
)

Output = Annotated[str, typer.Option("--output", "-o", help="yaml or json")]
Fleet = Annotated[
    str | None,
    typer.Option("--fleet", help="fleet spec (default: $GKR_FLEET, the user config, or ./fleet.yaml upward)"),
]
Context = Annotated[
    str | None, typer.Option("--context", help="kubeconfig context (default: the region's GKE context)")
]
Region = Annotated[
    str | None,
    typer.Option("--region", help="region of the cluster (default: the user config, else the team's largest quota)"),
]
Team = Annotated[str | None, typer.Option("--team", help="team (default: the user config)")]


def _console() -> Any:
    """Rich's console; piped (not a terminal), rich would cut tables to 80 columns: give them their full width."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=100_000)


def fail(lines: list[str]) -> None:
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    raise typer.Exit(2)


def choose(value: str, options: Any, flag: str) -> str:
    if value not in options:
        fail([f"{flag} {value!r}: use one of {', '.join(options)}"])
    return value


def _load_fleet(fleet: str | None) -> Any:
    """(user config, fleet registry); bad input ends here with exit 2."""
    from contract.problem import Invalid
    from gkr.config import find_fleet, user_config
    from gkr.registry import load

    try:
        config = user_config()
        path = find_fleet(fleet, config)
        registry = load(path)
    except Invalid as exc:
        fail(list(exc.lines))
    except (OSError, ValueError) as exc:
        fail([str(exc)])
    return config, registry


def _print(objects: list[dict[str, Any]], output: str) -> None:
    choose(output, ("yaml", "json"), "--output")
    if output == "json":
        print(json.dumps(objects if len(objects) != 1 else objects[0], indent=2))
    else:
        import yaml

        sys.stdout.write("---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects))


@app.command()
def submit(
    command: Annotated[list[str] | None, typer.Argument(help="the command, after --")] = None,
    file: Annotated[str | None, typer.Option("--file", "-f", help="job file (YAML)")] = None,
    name: Annotated[str | None, typer.Option("--name")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="rayjob (default), raycluster, job")] = None,
    team: Team = None,
    region: Region = None,
    pool: Annotated[str | None, typer.Option("--pool")] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image", help="from the fleet registry, by version or digest (default: the fleet's trainer image)"
        ),
    ] = None,
    pods: Annotated[int | None, typer.Option("--pods", help="GPU pods (Ray workers)")] = None,
    gpus_per_pod: Annotated[int | None, typer.Option("--gpus-per-pod")] = None,
    cpus_per_pod: Annotated[int | None, typer.Option("--cpus-per-pod")] = None,
    memory_per_pod_gib: Annotated[int | None, typer.Option("--memory-per-pod-gib")] = None,
    priority: Annotated[str | None, typer.Option("--priority")] = None,
    topology: Annotated[str | None, typer.Option("--topology", help="required:block, preferred:host, ...")] = None,
    no_preflight: Annotated[bool, typer.Option("--no-preflight", help="skip the preflight checks")] = False,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable")] = None,
    dataset: Annotated[
        list[str] | None, typer.Option("--dataset", help="a fleet dataset bucket, read-only at /data/NAME; repeatable")
    ] = None,
    workdir: Annotated[
        str | None,
        typer.Option(
            "--workdir",
            help="a local folder packed (without .gitignore/.gkrignore matches) and uploaded as the RayJob's working_dir",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the manifests, apply nothing")] = False,
    output: Output = "yaml",
    fleet: Fleet = None,
    context: Context = None,
) -> None:
    """Submit a RayJob (default), a persistent RayCluster or a plain Job."""
    from gkr.submit import flags_of, prepare

    if file is None and command and command[0].endswith((".yaml", ".yml")):
        fail(
            [
                f"{command[0]} is taken as the command; did you mean `gkr submit -f {command[0]}`? (a command goes after --)"
            ]
        )
    config, loaded = _load_fleet(fleet)
    given = {
        "name": name, "kind": kind, "team": team or (None if file else config.team), "region": region, "pool": pool, "image": image,
        "pods": pods, "gpus_per_pod": gpus_per_pod, "cpus_per_pod": cpus_per_pod, "memory_per_pod_gib": memory_per_pod_gib,
        "priority": priority, "command": command or None, "datasets": dataset or None,
    }  # fmt: skip
    try:
        flags = flags_of(given, topology, no_preflight, env)
        resolved, objects = prepare(file, flags, loaded, config.region)
    except ValueError as exc:
        fail(exc.args[0] if isinstance(exc.args[0], list) else [str(exc)])
    from gkr.summary import summary

    print(summary(resolved, context), file=sys.stderr)
    package = _workdir(workdir, resolved, objects) if workdir is not None else None
    try:
        if dry_run:
            if package is not None:
                print(f"would upload {package[1]}", file=sys.stderr)
            _print(objects, output)
            return
        api = _connect(loaded, resolved.region, context)
        if package is not None:
            _upload(*package, loaded.project)
        _apply(api, objects, context or resolved.context)
    finally:
        if package is not None:
            package[0].zip_path.unlink(missing_ok=True)
    print(f"submitted {resolved.spec.kind} {resolved.spec.name} to {resolved.namespace}", file=sys.stderr)


def _workdir(folder: str, resolved: Any, objects: list[dict[str, Any]]) -> tuple[Any, str]:
    """Pack the folder and point the RayJob at where it goes; (package, one-line description)."""
    from pathlib import Path

    from gkr import workdir

    if resolved.spec.kind != "rayjob":
        fail([f"--workdir: a {resolved.spec.kind} has no Ray job runtime environment; use --kind rayjob"])
    try:
        package = workdir.pack(Path(folder).expanduser())
    except workdir.WorkdirError as exc:
        fail([str(exc)])
    target = workdir.uri(resolved.region.checkpoint_bucket, resolved.team.name, package.sha256)
    workdir.attach(objects, target)
    return package, workdir.describe(package, target)


def _upload(package: Any, described: str, project: str) -> None:
    from gkr import workdir

    target = described.rsplit(" -> ", 1)[1]
    with api_errors(f"uploading the workdir to {target}"):
        uploaded = workdir.upload(package, target, project)
    print(f"{'uploaded' if uploaded else 'already uploaded'} {described}", file=sys.stderr)


def _apply(api: Any, objects: list[dict[str, Any]], context: str) -> None:
    from gkr import kube

    with api_errors(f"applying to {context}"):
        for obj in objects:
            kube.apply(api, obj)


@contextmanager
def api_errors(where: str) -> Iterator[None]:
    """The cluster's answer (or silence) in one line, exit 1."""
    try:
        yield
    except typer.Exit:
        raise
    except Exception as exc:
        print(f"error: {where} failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        raise typer.Exit(1) from None


def _target(
    fleet: str | None, team: str | None, region: str | None, context: str | None, with_context: bool = False
) -> Any:
    """(API client, namespace), and the context used when `with_context`."""
    from fleet import names

    config, registry = _load_fleet(fleet)
    team = team or config.team
    teams = {t.name: t for t in registry.teams}
    if team not in teams:
        fail([f"pass --team (one of {', '.join(teams)}) or set `team:` in the user config"])
    from gkr.defaults import default_region

    region_name = region or config.region or default_region(registry, teams[team]) or ""
    regions = {r.name: r for r in registry.regions}
    if region_name not in regions:
        fail([f"unknown region {region_name!r}; use one of {', '.join(regions)}"])
    api, namespace = _connect(registry, regions[region_name], context), names.team_namespace(team)
    return (api, namespace, context or registry.context(regions[region_name])) if with_context else (api, namespace)


def _connect(registry: Any, region: Any, context: str | None) -> Any:
    """An API client for the region's cluster; without credentials for it, the one command that gets them."""
    from gkr import kube

    target = context or registry.context(region)
    try:
        kube.check_context(target)
    except kube.NoContext as exc:
        other = " (or pass a --context that is in it)" if context else ""
        fail([f"{exc}; run: {registry.credentials_command(region)}{other}"])
    with api_errors("reading the kubeconfig"):
        return kube.client(target)


@app.command("list")
def list_jobs(
    team: Team = None, region: Region = None, fleet: Fleet = None, context: Context = None, output: Output = "table"
) -> None:
    """The team's jobs and clusters in a region."""
    from gkr import kube

    api, namespace = _target(fleet, team, region, context)
    with api_errors("listing jobs"):
        rows = [
            (kind, item) for kind in kube.KINDS for item in kube.list_jobs(api, namespace, kind, "meridian.dev/team")
        ]
    if output in ("yaml", "json"):
        _print([item for _, item in rows], output)
        return
    from rich.table import Table

    table = Table("kind", "name", "status", "queue")
    for kind, item in rows:
        status = item.get("status", {})
        state = (
            status.get("jobDeploymentStatus")
            or status.get("state")
            or next((c["type"] for c in status.get("conditions", []) if c.get("status") == "True"), "Pending")
        )
        table.add_row(
            kind,
            item["metadata"]["name"],
            str(state),
            item["metadata"].get("labels", {}).get("kueue.x-k8s.io/queue-name", ""),
        )
    _console().print(table)


@app.command()
def status(
    name: str,
    kind: Annotated[str, typer.Option("--kind")] = "rayjob",
    team: Team = None,
    region: Region = None,
    fleet: Fleet = None,
    context: Context = None,
    output: Output = "yaml",
) -> None:
    """One job's status, as the cluster reports it."""
    from gkr import kube

    choose(kind, kube.KINDS, "--kind")
    api, namespace = _target(fleet, team, region, context)
    with api_errors(f"reading {kind} {name}"):
        found = kube.get_job(api, namespace, kind, name)
    _print([found.get("status", {})], output)


@app.command()
def delete(
    name: str,
    kind: Annotated[str, typer.Option("--kind")] = "rayjob",
    team: Team = None,
    region: Region = None,
    fleet: Fleet = None,
    context: Context = None,
) -> None:
    """Delete a job or cluster, and its pods."""
    from gkr import kube

    choose(kind, kube.KINDS, "--kind")
    api, namespace = _target(fleet, team, region, context)
    with api_errors(f"deleting {kind} {name}"):
        kube.delete_job(api, namespace, kind, name)
    print(f"deleted {kind} {name}", file=sys.stderr)


@app.command()
def logs(
    name: str,
    role: Annotated[str, typer.Option("--role", help="head, worker or all")] = "head",
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    team: Team = None,
    region: Region = None,
    fleet: Fleet = None,
    context: Context = None,
) -> None:
    """Logs of a job's head, workers or all pods."""
    from gkr import kube

    choose(role, kube.ROLE_SELECTORS, "--role")
    api, namespace = _target(fleet, team, region, context)
    with api_errors(f"finding the pods of {name}"):
        names = kube.pods(api, namespace, name, role)
    if not names:
        fail([f"no {role} pods for {name} in {namespace} (yet)"])
    if not follow:
        for pod in names:
            sys.stdout.write(
                "".join(f"[{pod}] {line}\n" for line in str(kube.log(api, namespace, pod, False)).splitlines())
            )
        return
    _follow(api, namespace, names)


def _follow(api: Any, namespace: str, pods: list[str]) -> None:
    """Stream every pod's log at once, each line prefixed with its pod."""
    import threading

    from gkr import kube

    lock = threading.Lock()

    def pump(pod: str) -> None:
        pending = b""
        for chunk in kube.log(api, namespace, pod, True).stream():
            *complete, pending = (pending + chunk).split(b"\n")
            with lock:
                sys.stdout.write("".join(f"[{pod}] {line.decode(errors='replace')}\n" for line in complete))
                sys.stdout.flush()
        if pending:
            with lock:
                sys.stdout.write(f"[{pod}] {pending.decode(errors='replace')}\n")

    threads = [threading.Thread(target=pump, args=(pod,), daemon=True) for pod in pods]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@app.command()
def dashboard(
    name: str,
    kind: Annotated[str, typer.Option("--kind", help="rayjob or raycluster")] = "rayjob",
    port: Annotated[int, typer.Option("--port", help="local port")] = 8265,
    team: Team = None,
    region: Region = None,
    fleet: Fleet = None,
    context: Context = None,
) -> None:
    """Forward a running job's or cluster's Ray dashboard to localhost (kubectl port-forward; Ctrl-C stops)."""
    from gkr import kube

    choose(kind, ("rayjob", "raycluster"), "--kind")
    found = kube.kubectl()
    if found is None:
        fail(["kubectl not found: install it (gcloud components install kubectl) or put it on PATH"])
    api, namespace, target = _target(fleet, team, region, context, with_context=True)
    with api_errors(f"finding the Ray head of {kind} {name}"):
        try:
            service = kube.head_service(api, namespace, kind, name)
        except kube.NotReady as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(1) from None
    print(f"Ray dashboard of {kind} {name}: http://localhost:{port} (Ctrl-C stops)", file=sys.stderr)
    raise typer.Exit(_run(kube.port_forward(str(found), target, namespace, service, port)))


def _run(command: list[str]) -> int:
    import subprocess

    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 0


@app.command()
def preflight(
    pods: Annotated[int, typer.Option("--pods")] = 2,
    gpus_per_pod: Annotated[int, typer.Option("--gpus-per-pod")] = 8,
    team: Team = None,
    region: Region = None,
    pool: Annotated[str | None, typer.Option("--pool")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run")] = False,
    fleet: Fleet = None,
    context: Context = None,
) -> None:
    """Run only the preflight suite on a chosen shape (a Job: node checks, compute, then all-reduce across pods)."""
    import getpass

    submit(
        command=["preflight", "run", "--check", "compute"],
        name=f"preflight-{getpass.getuser().lower()[:20]}".rstrip("-"),
        kind="job",
        team=team,
        region=region,
        pool=pool,
        pods=pods,
        gpus_per_pod=gpus_per_pod,
        dry_run=dry_run,
        fleet=fleet,
        context=context,
    )


@app.command()
def clusters(
    fleet: Fleet = None,
    live: Annotated[bool, typer.Option("--live", help="ask each cluster's Kueue for GPUs in use and free")] = False,
    output: Output = "table",
) -> None:
    """Regions, their clusters, GPU types and each team's quota (with --live: free / nominal, from Kueue)."""
    _, registry = _load_fleet(fleet)
    rows = []
    for region in registry.regions:
        gpus: dict[str, int] = {}
        for pool in region.pools:
            gpus[pool.machine.gpu_type] = gpus.get(pool.machine.gpu_type, 0) + pool.nodes * pool.machine.gpus
        quota: dict[str, Any] = {t.name: t.quota.get(region.name, 0) for t in registry.teams}
        if live:
            quota, why = _live_quota(registry.context(region), quota)
            if why:
                fix = f"; run: {registry.credentials_command(region)}" if why == "no context" else ""
                print(f"{region.name}: unreachable ({why}){fix}", file=sys.stderr)
        rows.append({"region": region.name, "cluster": region.cluster, "gpus": gpus, "quota": quota})
    if output in ("yaml", "json"):
        _print(rows, output)
        return
    from rich.table import Table

    table = Table("region", "cluster", "GPUs", *(f"{'free / ' if live else ''}quota {t.name}" for t in registry.teams))
    for row in rows:
        cells = [
            f"{q['free']:,} / {q['nominal']:,}" if isinstance(q, dict) else (f"{q:,}" if isinstance(q, int) else str(q))
            for q in row["quota"].values()
        ]
        table.add_row(row["region"], row["cluster"], ", ".join(f"{n:,} {t}" for t, n in row["gpus"].items()), *cells)
    _console().print(table)


LIVE_TIMEOUT_S = 10.0  # per region: one region down must not hold up the others for minutes


def _live_quota(context: str, quota: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Per team {nominal, used, free} from the cluster's ClusterQueues, or 'unreachable: <why>' and why."""
    from gkr import kube

    try:
        queues = {q["metadata"]["name"]: q for q in kube.cluster_queues(kube.client(context), LIVE_TIMEOUT_S)}
    except Exception as exc:  # one region down must not hide the others
        why = kube.unreachable(exc)
        return dict.fromkeys(quota, f"unreachable: {why}"), why
    live: dict[str, Any] = {}
    for team in quota:
        nominal, used = kube.queue_gpus(queues[team]) if team in queues else (0, 0)
        live[team] = {"nominal": nominal, "used": used, "free": nominal - used}
    return live, ""
