"""What gkr's commands share: the common options, finding the registry, printing, and the two kinds of failure.

Bad input ends with one line per problem and exit 2 (`bad_input`, `fail`); the cluster's refusal or
silence with one line and exit 1 (`api_errors`). Nothing here loads the Kubernetes client or rich
until a command calls for them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import click
import typer
import yaml
from typer.core import TyperOption

from contract.names import team_namespace
from contract.problem import Exit, Invalid, report
from gkr import config, defaults, kube
from gkr import registry as registries
from gkr.commands.group import Group

# Where a command finds the fleet and the cluster: (option, help).
WHERE = {
    "team": ("--team", "team (default: the user config)"),
    "region": ("--region", "region of the cluster (default: the user config, else the team's largest quota)"),
    "registry": (
        "--registry",
        "the fleet registry: a folder with registry.json and schemas/, or the file (default: $GKR_REGISTRY, "
        "`registry:` in the user config, the checkout's generated/ upward, else `gkr registry fetch`'s copy)",
    ),
    "context": ("--context", "kubeconfig context (default: the region's GKE context)"),
}
GIVEN_WHERE = "gkr.where"  # where in click's context the options of `where_options` record what was given
Output = Annotated[str, typer.Option("--output", "-o", help="yaml or json")]
RegistryPath = Annotated[str | None, typer.Option(WHERE["registry"][0], help=WHERE["registry"][1])]
Context = Annotated[str | None, typer.Option(WHERE["context"][0], help=WHERE["context"][1])]
Kind = Annotated[str, typer.Option("--kind", help="rayjob, raycluster or job")]
LIVE_TIMEOUT_S = 10.0  # per region: one region down must not hold up the others for minutes


def typer_command(
    name: str, function: Callable[..., Any], extra: list[click.Parameter] | None = None, at: int | None = None
) -> click.Command:
    """A command from a typer-annotated function, for the lazy group; `extra` options go at `at` (default: last)."""
    app = typer.Typer(add_completion=False)
    app.command(name)(function)
    command = typer.main.get_command(app)
    at = len(command.params) if at is None else at
    command.params[at:at] = extra or []
    return Group.plain_defaults(command)


@dataclass(frozen=True)
class Where:
    """Where a command about existing jobs looks: the options of `where_options`, as given."""

    team: str | None = None
    region: str | None = None
    registry: str | None = None
    context: str | None = None


def where_options() -> list[click.Parameter]:
    """--team, --region, --registry, --context for a command about existing jobs, read back with `where(ctx)`."""

    def record(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        ctx.meta.setdefault(GIVEN_WHERE, {})[param.name] = value
        return value

    return [
        TyperOption(param_decls=[flag, name], help=text, expose_value=False, callback=record, show_default=False)
        for name, (flag, text) in WHERE.items()
    ]


def where(ctx: click.Context) -> Where:
    return Where(**ctx.meta.get(GIVEN_WHERE, {}))


def console() -> Any:
    """Rich's console; piped (not a terminal), rich would cut tables to 80 columns: give them their full width."""
    from rich.console import Console  # rich loads only for the commands that draw a table

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


def located(path: str | None) -> tuple[config.UserConfig, registries.Located]:
    """(user config, the located fleet registry); bad input ends here with exit 2."""
    try:
        user = config.user_config()
        found, how = registries.find(path, user.registry, config.config_path(), Path.cwd())
        return user, registries.load(found, how)
    except Invalid as exc:
        raise typer.Exit(report(exc)) from None


def print_objects(objects: list[dict[str, Any]], output: str) -> None:
    choose(output, ("yaml", "json"), "--output")
    if output == "json":
        print(json.dumps(objects if len(objects) != 1 else objects[0], indent=2))
    else:
        sys.stdout.write("---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects))


def print_per_cluster(objects: list[tuple[str, dict[str, Any]]], output: str) -> None:
    """Objects for several clusters: YAML documents each headed by a `# context:` comment, or JSON {context: [...]}."""
    choose(output, ("yaml", "json"), "--output")
    if output == "json":
        grouped: dict[str, list[dict[str, Any]]] = {}
        for context, obj in objects:
            grouped.setdefault(context, []).append(obj)
        print(json.dumps(grouped, indent=2))
        return
    sys.stdout.write("---\n".join(f"# context: {c}\n{yaml.safe_dump(o, sort_keys=False)}" for c, o in objects))


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


def connect(found: registries.Located, region: Any, context: str | None) -> Any:
    """An API client for the region's cluster; without credentials for it, the one command that gets them."""
    target = context or found.registry.context(region)
    try:
        kube.check_context(target)
    except kube.NoContext as exc:
        other = " (or pass a --context that is in it)" if context else ""
        fail([f"{exc}; run: {found.registry.credentials_command(region)}{other}"])
    with api_errors("reading the kubeconfig"):
        return kube.client(target)


def target(at: Where) -> tuple[Any, str, str]:
    """(API client, team namespace, the context used) for a command about existing jobs."""
    user, found = located(at.registry)
    with bad_input():
        chosen_team, chosen_region = defaults.target(found.registry, at.team or user.team, at.region or user.region)
    api = connect(found, chosen_region, at.context)
    return api, team_namespace(chosen_team.name), at.context or found.registry.context(chosen_region)


def job_target(kind: str, at: Where) -> tuple[Any, str]:
    """(API client, team namespace) for a command about one job of a kind (`status`, `delete`)."""
    choose(kind, kube.KINDS, "--kind")
    api, namespace, _ = target(at)
    return api, namespace


def run_clients(registry: str | None, regions: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """An API client for each region of a run that has a context here; for the others, why not (one line)."""
    _, found = located(registry)
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
