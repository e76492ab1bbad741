"""`gkr registry fetch` and `gkr registry show`: the fleet registry gkr reads, copied from a cluster or described."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from contract import registry as contract
from contract.problem import Exit, Invalid
from gkr import config, kube
from gkr import registry as registries
from gkr.commands.common import api_errors, bad_input, located
from gkr.commands.group import Group
from gkr.commands.options import RegistryPath

app = typer.Typer(
    cls=Group, no_args_is_help=True, help="The fleet registry gkr reads: which one, and a copy from a cluster."
)


@app.command("fetch")
def fetch(
    region: Annotated[str | None, typer.Option("--region", help="the region's GKE context")] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="a kubeconfig context (default: the current one)")
    ] = None,
) -> None:
    """Copy the fleet registry from a cluster (its ConfigMap) to $XDG_CACHE_HOME/gkr/registry/.

    gkr uses that copy only where it finds no checkout's generated/registry.json (or --registry,
    $GKR_REGISTRY, `registry:` in the user config).
    """
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
        raise SystemExit(Exit.FAILED) from None
    with bad_input():
        text, schemas = registries.unpack(data, binary, where)
    with api_errors(f"writing {registries.fetched_dir()}"):
        written = registries.store(text, schemas)
    print(f"wrote {written} and {len(schemas)} schemas from {where}", file=sys.stderr)


def _known_registry() -> Any:
    """A registry already at hand (to name a region's context), or None."""
    try:
        user = config.user_config()
        return registries.load(*registries.find(None, user.registry, config.config_path(), Path.cwd())).registry
    except Invalid:
        return None


@app.command("show")
def show(registry: RegistryPath = None) -> None:
    """Which registry gkr uses (and how it found it), its schema, and what it holds."""
    _, found = located(registry)
    schemas = sorted(p.name for p in found.schemas.glob("*.json")) if found.schemas.is_dir() else []
    reg = found.registry
    print(f"registry: {found.path}")
    print(f"found: {found.how}")
    print(f"schema: {contract.SCHEMA}")
    print(f"project: {reg.project}; regions: {', '.join(r.name for r in reg.regions)}")
    print(f"schemas: {', '.join(schemas) or f'none (no {found.schemas})'}")


command = typer.main.get_command(app)
