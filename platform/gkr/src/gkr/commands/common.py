"""What gkr's commands share: finding the registry, printing, and the two kinds of failure.

Bad input ends with one line per problem and exit 2 (`bad_input`, `fail`); the cluster's refusal or
silence with one line and exit 1 (`api_errors`); each ends the command with SystemExit, which click
passes through as it is. Nothing here loads click, typer, rich or the Kubernetes client: `gkr submit`
runs without them (the options typer declares: gkr/commands/options.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from contract.names import team_namespace
from contract.problem import Exit, Invalid, report
from gkr import config, defaults, kube
from gkr import registry as registries

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
OUTPUT_HELP = "yaml or json"
LIVE_TIMEOUT_S = 10.0  # per region: one region down must not hold up the others for minutes
# libyaml's emitter when present: it writes what PyYAML's own does (the golden dry-runs), in a quarter of the
# time. It cannot write a lone surrogate, which never gets this far: the job's text is refused first (spec.py).
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass(frozen=True)
class Where:
    """Where a command about existing jobs looks: the options of `where_options`, as given."""

    team: str | None = None
    region: str | None = None
    registry: str | None = None
    context: str | None = None


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
        raise SystemExit(report(exc)) from None


def fail(lines: list[str]) -> None:
    raise SystemExit(report(Invalid(lines)))


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
        raise SystemExit(report(exc)) from None


def print_objects(objects: list[dict[str, Any]], output: str) -> None:
    choose(output, ("yaml", "json"), "--output")
    if output == "json":
        print(json.dumps(objects if len(objects) != 1 else objects[0], indent=2))
    else:
        sys.stdout.write("---\n".join(_yaml(o) for o in objects))


def print_per_cluster(objects: list[tuple[str, dict[str, Any]]], output: str) -> None:
    """Objects for several clusters: YAML documents each headed by a `# context:` comment, or JSON {context: [...]}."""
    choose(output, ("yaml", "json"), "--output")
    if output == "json":
        grouped: dict[str, list[dict[str, Any]]] = {}
        for context, obj in objects:
            grouped.setdefault(context, []).append(obj)
        print(json.dumps(grouped, indent=2))
        return
    sys.stdout.write("---\n".join(f"# context: {c}\n{_yaml(o)}" for c, o in objects))


def _yaml(obj: dict[str, Any]) -> str:
    return yaml.dump(obj, Dumper=_DUMPER, sort_keys=False)


@contextmanager
def api_errors(where: str) -> Iterator[None]:
    """The cluster's answer (or silence) in one line, exit 1."""
    try:
        yield
    except Exception as exc:  # not SystemExit: a failure inside was reported already
        print(f"error: {where} failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        raise SystemExit(Exit.FAILED) from None


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
