"""gkr: submit and inspect training jobs on the Meridian fleet.

Exit codes: 0 done, 1 the cluster said no (API error), 2 bad input (one line
per problem, nothing applied).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer
from typer.core import TyperGroup

from contract.problem import Exit, Invalid, report

if TYPE_CHECKING:
    from gkr.config import UserConfig
    from gkr.registry import Located


class _Commands(TyperGroup):
    """Help without `[default: None]`: an option left unset means "resolved from the fleet", as its help says."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """--fleet (gone with the registry) is refused in one line wherever it appears before `--`."""
        from gkr.registry import replaced

        for i, arg in enumerate(args[: args.index("--") if "--" in args else len(args)]):
            if arg == "--fleet" or arg.startswith("--fleet="):
                value = arg.partition("=")[2] or (args[i + 1] if i + 1 < len(args) else "fleet.yaml")
                raise typer.Exit(report(replaced("--fleet", value)))
        return super().parse_args(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        for param in command.params if command is not None else ():
            if param.default is None and isinstance(param, click.Option | click.Argument):
                param.show_default = False  # type: ignore[union-attr]
        return command


app = typer.Typer(
    cls=_Commands, add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False
)
registry_app = typer.Typer(
    cls=_Commands, no_args_is_help=True, help="The fleet registry gkr reads: which one, and a copy from a cluster."
)
app.add_typer(registry_app, name="registry")

Output = Annotated[str, typer.Option("--output", "-o", help="yaml or json")]
RegistryPath = Annotated[
    str | None,
    typer.Option(
        "--registry",
        help="the fleet registry: a folder with registry.json and schemas/, or the file (default: $GKR_REGISTRY, "
        "`registry:` in the user config, the checkout's generated/ upward, else `gkr registry fetch`'s copy)",
    ),
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


@contextmanager
def bad_input() -> Iterator[None]:
    """Invalid input ends here: one line per problem on stderr, exit 2."""
    try:
        yield
    except Invalid as exc:
        raise typer.Exit(report(exc)) from None


def fail(lines: list[str]) -> None:
    raise typer.Exit(report(Invalid(lines)))


def choose(value: str, options: Any, flag: str) -> str:
    if value not in options:
        fail([f"{flag} {value!r}: use one of {', '.join(options)}"])
    return value


def _registry(path: str | None) -> tuple[UserConfig, Located]:
    """(user config, the located fleet registry); bad input ends here with exit 2."""
    from pathlib import Path

    from gkr import config, registry

    try:
        user = config.user_config()
        found, how = registry.find(path, user.registry, config.config_path(), Path.cwd())
        return user, registry.load(found, how)
    except Invalid as exc:
        raise typer.Exit(report(exc)) from None


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
    region: Annotated[
        list[str] | None,
        typer.Option(
            "--region",
            help="region of the cluster (default: the user config, else the team's largest quota); "
            "repeat as REGION=REPLICA_GROUPS for a run across regions",
        ),
    ] = None,
    home: Annotated[
        str | None, typer.Option("--home", help="a run across regions: where its Lighthouse runs (default: the first)")
    ] = None,
    min_replicas: Annotated[
        int | None, typer.Option("--min-replicas", help="a run across regions: the Lighthouse's quorum floor (1)")
    ] = None,
    force_per_step_sync: Annotated[
        bool, typer.Option("--force-per-step-sync", help="allow DDP (a sync every step) across regions")
    ] = False,
    pool: Annotated[str | None, typer.Option("--pool")] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image", help="from the fleet registry, by version or digest (default: the fleet's trainer image)"
        ),
    ] = None,
    pods: Annotated[int | None, typer.Option("--pods", help="GPU pods (Ray workers)")] = None,
    gpus_per_pod: Annotated[int | None, typer.Option("--gpus-per-pod")] = None,
    replica_groups: Annotated[
        int | None, typer.Option("--replica-groups", help="replica groups the GPUs form (or give --group-size)")
    ] = None,
    group_size: Annotated[int | None, typer.Option("--group-size", help="GPUs (ranks) in each replica group")] = None,
    spare_groups: Annotated[
        int | None,
        typer.Option(
            "--spare-groups",
            help="idle replica groups the run holds for replacements, 0-64 (default: 1 from 256 groups, "
            "1 more per 1,024; the trainer on Ray only)",
        ),
    ] = None,
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
    registry: RegistryPath = None,
    context: Context = None,
) -> None:
    """Submit a RayJob (default), a persistent RayCluster or a plain Job."""
    if file is None and command and command[0].endswith((".yaml", ".yml")):
        fail(
            [
                f"{command[0]} is taken as the command; did you mean `gkr submit -f {command[0]}`? (a command goes after --)"
            ]
        )
    given = {
        "name": name, "kind": kind, "team": team, "region": region, "pool": pool, "image": image, "pods": pods,
        "gpus_per_pod": gpus_per_pod, "replica_groups": replica_groups, "group_size": group_size,
        "spare_groups": spare_groups,
        "cpus_per_pod": cpus_per_pod, "memory_per_pod_gib": memory_per_pod_gib,
        "priority": priority, "command": command or None, "datasets": dataset or None,
        "home": home, "min_replicas": min_replicas,
    }  # fmt: skip
    _submit(file, given, topology, no_preflight, env, workdir, dry_run, output, registry, context, force_per_step_sync)


@app.command()
def preflight(
    pods: Annotated[int, typer.Option("--pods")] = 2,
    gpus_per_pod: Annotated[int, typer.Option("--gpus-per-pod")] = 8,
    team: Team = None,
    region: Region = None,
    pool: Annotated[str | None, typer.Option("--pool")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run")] = False,
    registry: RegistryPath = None,
    context: Context = None,
) -> None:
    """Run only the preflight suite on a chosen shape (a Job: node checks, compute, then all-reduce across pods)."""
    import getpass

    from gkr.submit import preflight_job

    given = {**preflight_job(getpass.getuser(), pods, gpus_per_pod), "team": team, "region": region, "pool": pool}
    _submit(None, given, None, False, None, None, dry_run, "yaml", registry, context)


def _submit(
    file: str | None,
    given: dict[str, Any],
    topology: str | None,
    no_preflight: bool,
    env: list[str] | None,
    workdir: str | None,
    dry_run: bool,
    output: str,
    registry: str | None,
    context: str | None,
    force_per_step_sync: bool = False,
) -> None:
    """What `submit` and `preflight` share: prepare, print the summary, then print or apply."""
    from gkr.submit import flags_of, prepare_job, read
    from gkr.summary import summary

    config, found = _registry(registry)
    with bad_input():
        flags = flags_of(given, topology, no_preflight, env, force_per_step_sync)
        spec, origins = read(file, flags, config.team)
        if spec.regions:
            if context is not None or workdir is not None:
                flag = "--context" if context is not None else "--workdir"
                raise Invalid([f"flag {flag}: not for a run across regions yet (each region uses its GKE context)"])
            from gkr import multiregion  # runs across regions only: a one-region submit never loads it

            run = multiregion.prepare(spec, origins, found)
    if spec.regions:
        _submit_run(run, found, dry_run, output)
        return
    with bad_input():
        resolved, objects = prepare_job(spec, origins, found, config.region)
    print(summary(resolved, context), file=sys.stderr)
    package = None
    if workdir is not None:
        from pathlib import Path

        from gkr import workdir as workdirs

        with bad_input():
            package, target = workdirs.prepare(
                Path(workdir).expanduser(), resolved.spec.kind, resolved.region.checkpoint_bucket,
                resolved.team.name, objects,
            )  # fmt: skip
        described = workdirs.describe(package, target)
    try:
        if dry_run:
            if package is not None:
                print(f"would upload {described}", file=sys.stderr)
            _print(objects, output)
            return
        api = _connect(found, resolved.region, context)
        if package is not None:
            with api_errors(f"uploading the workdir to {target}"):
                uploaded = workdirs.upload(package, target, found.registry.project)
            print(f"{'uploaded' if uploaded else 'already uploaded'} {described}", file=sys.stderr)
        _apply(api, objects, context or resolved.context)
    finally:
        if package is not None:
            package.zip_path.unlink(missing_ok=True)
    print(f"submitted {resolved.spec.kind} {resolved.spec.name} to {resolved.namespace}", file=sys.stderr)


def _submit_run(run: Any, found: Located, dry_run: bool, output: str) -> None:
    """A run across regions: the summary per region, then every cluster's objects printed, or applied all or nothing."""
    from gkr import launch
    from gkr.summary import run_summary

    registry = found.registry
    print(run_summary(run), file=sys.stderr)
    if dry_run:
        by_context = [(registry.context(run.home.resolved.region), o) for o in run.lighthouse]
        by_context += [(registry.context(p.resolved.region), o) for p in run.parts for o in (p.secret, p.rayjob)]
        _print_per_cluster(by_context, output)
        return
    apis = {p.region: _connect(found, p.resolved.region, None) for p in run.parts}  # every context before any apply
    try:
        launch.submit(run, apis, lambda line: print(line, file=sys.stderr))
    except launch.Failed as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(Exit.FAILED) from None
    regions = ", ".join(f"{p.region} ({registry.context(p.resolved.region)})" for p in run.parts)
    print(f"submitted run {run.name} to {run.home.resolved.namespace} in {regions}", file=sys.stderr)


def _print_per_cluster(objects: list[tuple[str, dict[str, Any]]], output: str) -> None:
    """Objects for several clusters: YAML documents each headed by a `# context:` comment, or JSON {context: [...]}."""
    choose(output, ("yaml", "json"), "--output")
    if output == "json":
        grouped: dict[str, list[dict[str, Any]]] = {}
        for context, obj in objects:
            grouped.setdefault(context, []).append(obj)
        print(json.dumps(grouped, indent=2))
        return
    import yaml

    sys.stdout.write("---\n".join(f"# context: {c}\n{yaml.safe_dump(o, sort_keys=False)}" for c, o in objects))


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
        raise typer.Exit(Exit.FAILED) from None


def _target(registry: str | None, team: str | None, region: str | None, context: str | None) -> tuple[Any, str, str]:
    """(API client, team namespace, the context used)."""
    from contract.names import team_namespace
    from gkr.defaults import target

    config, found = _registry(registry)
    with bad_input():
        chosen_team, chosen_region = target(found.registry, team or config.team, region or config.region)
    api = _connect(found, chosen_region, context)
    return api, team_namespace(chosen_team.name), context or found.registry.context(chosen_region)


def _connect(found: Located, region: Any, context: str | None) -> Any:
    """An API client for the region's cluster; without credentials for it, the one command that gets them."""
    from gkr import kube

    target = context or found.registry.context(region)
    try:
        kube.check_context(target)
    except kube.NoContext as exc:
        other = " (or pass a --context that is in it)" if context else ""
        fail([f"{exc}; run: {found.registry.credentials_command(region)}{other}"])
    with api_errors("reading the kubeconfig"):
        return kube.client(target)


@app.command("list")
def list_jobs(
    team: Team = None,
    region: Region = None,
    registry: RegistryPath = None,
    context: Context = None,
    output: Output = "table",
) -> None:
    """The team's jobs and clusters in a region."""
    from contract.names import TEAM_LABEL
    from gkr import kube, views

    api, namespace, _ = _target(registry, team, region, context)
    with api_errors("listing jobs"):
        rows = [(kind, item) for kind in kube.KINDS for item in kube.list_jobs(api, namespace, kind, TEAM_LABEL)]
    if output in ("yaml", "json"):
        _print([item for _, item in rows], output)
        return
    from rich.table import Table

    table = Table("kind", "name", "status", "queue", "run (* home)")
    for kind, item in rows:
        table.add_row(*views.job_row(kind, item))
    _console().print(table)
    if any(views.run_cell(item) for _, item in rows):
        _console().print(
            "a run spans regions: `gkr status NAME` shows every region's part, `gkr delete NAME` removes all"
        )


@app.command()
def status(
    name: str,
    kind: Annotated[str, typer.Option("--kind")] = "rayjob",
    team: Team = None,
    region: Region = None,
    registry: RegistryPath = None,
    context: Context = None,
    output: Output = "yaml",
) -> None:
    """One job's status, as the cluster reports it."""
    from gkr import kube

    choose(kind, kube.KINDS, "--kind")
    api, namespace, _ = _target(registry, team, region, context)
    with api_errors(f"reading {kind} {name}"):
        found = kube.get_job(api, namespace, kind, name)
    run = _run_of(found)
    if run is None:
        _print([found.get("status", {})], output)
        return
    from gkr import launch, views

    apis, why = _run_clients(registry, run[1])
    parts = {**launch.find(apis, namespace, run[0], run[2]), **why}
    _print([views.run_status(run[0], run[2], {r: parts[r] for r in run[1]})], output)


def _run_of(obj: dict[str, Any]) -> tuple[str, list[str], str] | None:
    from gkr import lighthouse

    return lighthouse.run_of(obj)


def _run_clients(registry: str | None, regions: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """An API client for each region of a run that has a context here; for the others, why not (one line)."""
    from gkr import kube

    _, found = _registry(registry)
    known = {r.name: r for r in found.registry.regions}
    apis, why = {}, {}
    for name in regions:
        region = known.get(name)
        if region is None:
            why[name] = "unreachable: not a region of this registry"
            continue
        try:
            apis[name] = kube.client(found.registry.context(region))
        except kube.NoContext as exc:
            why[name] = f"unreachable: {exc}; run: {found.registry.credentials_command(region)}"
        except Exception as exc:
            why[name] = f"unreachable: {kube.unreachable(exc)}"
    return apis, why


@app.command()
def delete(
    name: str,
    kind: Annotated[str, typer.Option("--kind")] = "rayjob",
    team: Team = None,
    region: Region = None,
    registry: RegistryPath = None,
    context: Context = None,
) -> None:
    """Delete a job or cluster, and its pods."""
    from gkr import kube

    choose(kind, kube.KINDS, "--kind")
    api, namespace, _ = _target(registry, team, region, context)
    run = None
    if kind == "rayjob":  # a RayJob may be one region's part of a run: then the whole run goes
        with api_errors(f"reading {kind} {name}"):
            run = _run_of(kube.get_job(api, namespace, kind, name))
    if run is not None:
        _delete_run(registry, namespace, run)
        return
    with api_errors(f"deleting {kind} {name}"):
        kube.delete_job(api, namespace, kind, name)
    print(f"deleted {kind} {name}", file=sys.stderr)


def _delete_run(registry: str | None, namespace: str, run: tuple[str, list[str], str]) -> None:
    """Every region's RayJob of the run and its Lighthouse; what could not be reached is named, exit 1."""
    from gkr import launch

    name, regions, home = run
    apis, why = _run_clients(registry, regions)
    deleted, failed = launch.delete(apis, {**launch.find(apis, namespace, name, home), **why})
    for line in deleted:
        print(f"deleted {line}", file=sys.stderr)
    if failed:
        print(f"error: run {name} not wholly deleted: {'; '.join(failed)}; run `gkr delete` again", file=sys.stderr)
        raise typer.Exit(Exit.FAILED)
    print(f"deleted run {name} in {', '.join(regions)}", file=sys.stderr)


@app.command()
def logs(
    name: str,
    role: Annotated[str, typer.Option("--role", help="head, worker or all")] = "head",
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    team: Team = None,
    region: Region = None,
    registry: RegistryPath = None,
    context: Context = None,
) -> None:
    """Logs of a job's head, workers or all pods."""
    from gkr import kube, views

    choose(role, kube.ROLE_SELECTORS, "--role")
    api, namespace, _ = _target(registry, team, region, context)
    with api_errors(f"finding the pods of {name}"):
        found = kube.pod_metadata(api, namespace, name, role)
    run = next((r for r in (_run_of({"metadata": m}) for m in found.values()) if r), None)
    apis: dict[str, Any] = {"": api}
    if run is not None:  # a run across regions: every region's pods, each line prefixed with its region
        apis, why = _run_clients(registry, run[1])
        for region_name, reason in why.items():
            print(f"{region_name}: {reason}", file=sys.stderr)
    pods: dict[str, list[str]] = {}
    for where, client in apis.items():
        with api_errors(f"finding the pods of {name}{f' in {where}' if where else ''}"):
            pods[where] = sorted(found) if client is api and not where else kube.pods(client, namespace, name, role)
    if not any(pods.values()):
        fail([f"no {role} pods for {name} in {namespace} (yet)"])

    def label(where: str, pod: str) -> str:
        return f"{where}/{pod}" if where else pod

    if not follow:
        for where, names in pods.items():
            for pod in names:
                text = str(kube.log(apis[where], namespace, pod, False))
                sys.stdout.write(views.prefixed(label(where, pod), text))
        return

    import threading

    lock = threading.Lock()

    def follower(where: str) -> threading.Thread:
        def write(pod: str, line: str) -> None:
            with lock:
                sys.stdout.write(f"[{label(where, pod)}] {line}\n")
                sys.stdout.flush()

        return threading.Thread(target=kube.follow_logs, args=(apis[where], namespace, pods[where], write), daemon=True)

    threads = [follower(where) for where in pods if pods[where]]
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
    registry: RegistryPath = None,
    context: Context = None,
) -> None:
    """Forward a running job's or cluster's Ray dashboard to localhost (kubectl port-forward; Ctrl-C stops)."""
    from gkr import kube

    choose(kind, ("rayjob", "raycluster"), "--kind")
    found = kube.kubectl()
    if found is None:
        fail(["kubectl not found: install it (gcloud components install kubectl) or put it on PATH"])
    api, namespace, target = _target(registry, team, region, context)
    with api_errors(f"finding the Ray head of {kind} {name}"):
        try:
            service = kube.head_service(api, namespace, kind, name)
        except kube.NotReady as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(Exit.FAILED) from None
    print(f"Ray dashboard of {kind} {name}: http://localhost:{port} (Ctrl-C stops)", file=sys.stderr)
    raise typer.Exit(_run(kube.port_forward(str(found), target, namespace, service, port)))


def _run(command: list[str]) -> int:
    import subprocess

    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 0


LIVE_TIMEOUT_S = 10.0  # per region: one region down must not hold up the others for minutes


@app.command()
def clusters(
    registry: RegistryPath = None,
    live: Annotated[bool, typer.Option("--live", help="ask each cluster's Kueue for GPUs in use and free")] = False,
    output: Output = "table",
) -> None:
    """Regions, their clusters, GPU types and each team's quota (with --live: free / nominal, from Kueue)."""
    from gkr import kube, views

    _, found = _registry(registry)
    reg = found.registry
    rows = []
    for region in reg.regions:
        quota = views.nominal_quota(reg, region)
        if live:
            queues, why = kube.cluster_queues_or_why(reg.context(region), LIVE_TIMEOUT_S)
            quota = views.live_quota(list(quota), queues, why)
            if why:
                fix = f"; run: {reg.credentials_command(region)}" if why == "no context" else ""
                print(f"{region.name}: unreachable ({why}){fix}", file=sys.stderr)
        rows.append(views.capacity_row(region, quota))
    if output in ("yaml", "json"):
        _print(rows, output)
        return
    from rich.table import Table

    table = Table(*views.capacity_header(reg, live))
    for row in rows:
        table.add_row(*views.capacity_cells(row))
    _console().print(table)


@app.command()
def health(
    region: Annotated[
        list[str] | None, typer.Option("--region", help="only this region (repeatable; default: every region)")
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="kubeconfig context for the one region chosen")
    ] = None,
    nodes: Annotated[bool, typer.Option("--nodes", help="also one line per node")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="the whole report as JSON (schema meridian.health/v1)")
    ] = False,
    due_after: Annotated[
        float | None,
        typer.Option("--due-after", help="days after its last deep check a node is due (default: Warden's cadence)"),
    ] = None,
    registry: RegistryPath = None,
) -> None:
    """Operators: per cluster and pool, nodes by Warden state, deep checks due, failures in the last 7 days."""
    import math
    import time

    from gkr import health as report
    from gkr import health_read, kube

    _, found = _registry(registry)
    reg = found.registry
    known = {r.name: r for r in reg.regions}
    if due_after is not None and not (math.isfinite(due_after) and 0 < due_after <= 3650):
        fail([f"--due-after {due_after}: a number of days in (0, 3650]"])
    unknown = [r for r in region or [] if r not in known]
    if unknown:
        from contract.problem import one_of

        fail([f"--region {unknown[0]}: {one_of(known, unknown[0])}"])
    chosen = [known[r] for r in dict.fromkeys(region)] if region else list(reg.regions)
    if context is not None and len(chosen) != 1:
        fail(["--context names one cluster's context: give one --region with it"])
    now = time.time()
    clusters = []
    for r in chosen:
        target = context or reg.context(r)
        where = {"region": r.name, "cluster": r.cluster, "context": target}
        try:
            read = health_read.read(
                kube.client(target), LIVE_TIMEOUT_S, None if due_after is None else due_after * 86400
            )
        except Exception as exc:
            why = kube.unreachable(exc)
            fix = f"; run: {reg.credentials_command(r)}" if why in ("no context", "no kubeconfig") else ""
            clusters.append(report.unreachable_report(where, why + fix))
            continue
        listed = report.nodes_of(read.nodes, read.events, now, read.cadence["seconds"])
        clusters.append(report.cluster_report(where, listed, read.cadence, read.notes))
    whole = report.report(clusters, now)
    if as_json:
        print(json.dumps(whole, indent=2))
    else:
        _health_table(whole, nodes)
    if any(not c["reachable"] for c in clusters):
        raise typer.Exit(Exit.FAILED)


def _health_table(whole: dict[str, Any], nodes: bool) -> None:
    from rich.table import Table

    from gkr import health as report

    table = Table(*report.POOL_HEADER)
    for cluster in whole["clusters"]:
        for row in cluster.get("pools", []):
            table.add_row(*report.pool_cells(cluster, row))
    _console().print(table)
    for cluster in whole["clusters"]:
        if not cluster["reachable"]:
            print(f"{cluster['region']}: unreachable ({cluster['error']})")
            continue
        days = cluster["cadence"]["seconds"] / 86400
        print(f"{cluster['region']}: due after {days:g} days ({cluster['cadence']['source']})")
        for note in cluster["notes"]:
            print(f"{cluster['region']}: note: {note}")
        for node in cluster["nodes"] if nodes else []:
            print(report.node_line(node))


@registry_app.command("fetch")
def registry_fetch(
    region: Annotated[str | None, typer.Option("--region", help="the region's GKE context")] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="a kubeconfig context (default: the current one)")
    ] = None,
) -> None:
    """Copy the fleet registry from a cluster (its ConfigMap) to $XDG_CACHE_HOME/gkr/registry/.

    gkr uses that copy only where it finds no checkout's generated/registry.json (or --registry,
    $GKR_REGISTRY, `registry:` in the user config).
    """
    from contract import registry as contract
    from gkr import kube
    from gkr import registry as registries

    known = _known_registry() if region else None
    with bad_input():
        try:
            names, current = kube.contexts()
        except kube.NoContext as exc:
            raise Invalid([f"{exc}; run: {registries.credentials(region, known)}"]) from None
        source = registries.source_context(region, context, known, names, current)
    where = f"ConfigMap {contract.REGISTRY_NAMESPACE}/{contract.REGISTRY_CONFIGMAP} in {source}"
    try:
        data, binary = kube.read_configmap(
            kube.client(source), contract.REGISTRY_NAMESPACE, contract.REGISTRY_CONFIGMAP
        )
    except Exception as exc:
        print(f"error: reading {where} failed: {registries.fetch_failed(kube.unreachable(exc))}", file=sys.stderr)
        raise typer.Exit(Exit.FAILED) from None
    with bad_input():
        text, schemas = registries.unpack(data, binary, where)
    with api_errors(f"writing {registries.fetched_dir()}"):
        written = registries.store(text, schemas)
    print(f"wrote {written} and {len(schemas)} schemas from {where}", file=sys.stderr)


def _known_registry() -> Any:
    """A registry already at hand (to name a region's context), or None."""
    from pathlib import Path

    from gkr import config, registry

    try:
        user = config.user_config()
        return registry.load(*registry.find(None, user.registry, config.config_path(), Path.cwd())).registry
    except Invalid:
        return None


@registry_app.command("show")
def registry_show(registry: RegistryPath = None) -> None:
    """Which registry gkr uses (and how it found it), its schema, and what it holds."""
    from contract import registry as contract

    _, found = _registry(registry)
    schemas = sorted(p.name for p in found.schemas.glob("*.json")) if found.schemas.is_dir() else []
    reg = found.registry
    print(f"registry: {found.path}")
    print(f"found: {found.how}")
    print(f"schema: {contract.SCHEMA}")
    print(f"project: {reg.project}; regions: {', '.join(r.name for r in reg.regions)}")
    print(f"schemas: {', '.join(schemas) or f'none (no {found.schemas})'}")
