"""Run gkr in-process against the registry of the shipped fleet, with no user config.

gkr reads the registry `make generate` writes (registry.json and schemas/); the tests build
that folder from a fleet.yaml with fleet (tests may import it, gkr may not): once per
session for each distinct fleet.yaml.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result
from typer.testing import CliRunner

from contract import registry as contract
from gkr import registry as gkr_registry
from gkr.commands.group import app
from tests.conftest import REPO, SHIPPED

EXAMPLES = Path(__file__).resolve().parents[2] / "platform" / "gkr" / "examples"
GOLDEN = Path(__file__).parent / "golden"
_FOLDERS = tempfile.TemporaryDirectory(prefix="gkr-registries-")  # removed when the session ends


@cache
def _generated(text: str) -> Path:
    from fleet.gitops.schemas import crd_schemas
    from fleet.load import load_text
    from fleet.registry import registry_of

    loaded = load_text(text, "fleet.yaml")
    folder = Path(_FOLDERS.name) / hashlib.sha256(text.encode()).hexdigest()[:16] / contract.GENERATED_DIR
    (folder / contract.SCHEMAS_DIR).mkdir(parents=True)
    (folder / contract.FILE).write_text(contract.dumps(registry_of(loaded)), encoding="utf-8")
    for path, schema in crd_schemas(loaded.fleet, REPO).items():
        (folder / contract.SCHEMAS_DIR / Path(path).name).write_text(schema, encoding="utf-8")
    return folder


def registry_folder(fleet_yaml: Path = SHIPPED) -> Path:
    """What `make generate` writes for this fleet.yaml as gkr reads it: registry.json and schemas/."""
    return _generated(fleet_yaml.read_text(encoding="utf-8"))


def use_contexts(folder: Path, monkeypatch: pytest.MonkeyPatch, servers: dict[str, str], token: str = "t0ken") -> None:
    """A kubeconfig with a context (and its cluster and user) per server, the first current, through $KUBECONFIG."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": s}} for c, s in servers.items()],
        "users": [{"name": c, "user": {"token": token}} for c in servers],
        "contexts": [{"name": c, "context": {"cluster": c, "user": c}} for c in servers],
        "current-context": next(iter(servers)),
    }
    (folder / "kubeconfig").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(folder / "kubeconfig"))


def shipped() -> gkr_registry.Located:
    """The shipped fleet's registry, as gkr finds it."""
    return gkr_registry.load(registry_folder())


@pytest.fixture
def gkr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """`gkr COMMAND --registry <the shipped fleet's> ARGS...` ("registry" subcommands get no --registry)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user config
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no fetched registry
    monkeypatch.delenv("GKR_REGISTRY", raising=False)
    monkeypatch.delenv("GKR_FLEET", raising=False)
    folder = str(registry_folder())

    def run(*args: str) -> Result:
        if args and args[0] not in ("--help", "registry"):
            args = (args[0], "--registry", folder, *args[1:])
        return CliRunner().invoke(app, list(args))

    return run


@dataclass(frozen=True)
class DryRun:
    """What `gkr ... --dry-run -o yaml` prints: each object with the kubeconfig context it goes to, and stderr."""

    objects: tuple[tuple[str, dict[str, Any]], ...]
    stderr: str

    def pool(self, context: str) -> str | None:
        """The pool gkr's summary names for the job in that cluster ("-> CONTEXT (..., pool P)"), or None."""
        found = re.search(rf"-> {re.escape(context)} \(.*?pool ([a-z0-9-]+)\)$", self.stderr, re.MULTILINE)
        return found.group(1) if found else None


def dry_run(*args: str) -> DryRun:
    """`gkr COMMAND --dry-run ARGS` on the shipped fleet's registry, with no user config, as a researcher runs it.

    One cluster: gkr names its context on stderr; several: a `# context:` line heads each document.
    """
    home = tempfile.mkdtemp(prefix="gkr-dry-run-")  # no user config, no fetched registry
    env: dict[str, str | None] = {
        "XDG_CONFIG_HOME": home,
        "XDG_CACHE_HOME": home,
        "GKR_REGISTRY": None,
        "GKR_FLEET": None,
    }
    result = CliRunner().invoke(app, [args[0], "--registry", str(registry_folder()), "--dry-run", *args[1:]], env=env)  # type: ignore[arg-type]  # None unsets
    assert result.exit_code == 0, result.stderr
    default = next(w for w in result.stderr.split() if w.startswith("gke_"))
    found = []
    for document in result.stdout.split("\n---\n"):
        head = document.lstrip().splitlines()[0] if document.strip() else ""
        context = head.removeprefix("# context: ") if head.startswith("# context: ") else default
        found.append((context, yaml.safe_load(document)))
    return DryRun(tuple(found), result.stderr)
