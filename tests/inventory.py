"""Where the written-down inventories live and how each is made: for the shipped fleet.yaml and every
example fleet (platform/fleet/examples/), the stacks' facts in tests/infra/inventory/<fleet>.yaml and
each cluster's in tests/gitops/inventory/<fleet>/<cluster>.yaml.

The tests (tests/infra/test_inventory.py, tests/gitops/test_inventory.py) compare what the code makes
now with these files; `scripts/inventory.py --write` rewrites them, so a deliberate change to a plan
updates them in the same commit and the reviewer reads the difference.
"""

from __future__ import annotations

import difflib
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from contract.problem import Invalid
from fleet.gitops.check import ClusterTree
from fleet.gitops.inventory import cluster
from fleet.gitops.plan import built_trees
from fleet.inventory import dumps
from fleet.load import load
from meridian_infra.inventory import inventory
from meridian_infra.report import Stacks
from meridian_infra.synth import synth
from tests.conftest import REPO, SHIPPED

EXAMPLES = REPO / "platform" / "fleet" / "examples"
INFRA = REPO / "tests" / "infra" / "inventory"
GITOPS = REPO / "tests" / "gitops" / "inventory"
KUBECTL = str(Path(sys.executable).parent / "kubectl")
WRITE = "scripts/inventory.py --write"


def fleets() -> list[Path]:
    """The shipped fleet, then every example fleet by name."""
    return [SHIPPED, *sorted(EXAMPLES.glob("*.yaml"))]


def name(fleet: Path) -> str:
    """What a fleet's inventories are called: `fleet` for the shipped one, an example's file name otherwise."""
    return fleet.stem


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def infra_file(fleet: Path) -> Path:
    return INFRA / f"{name(fleet)}.yaml"


def cluster_file(fleet: Path, cluster_name: str) -> Path:
    return GITOPS / name(fleet) / f"{cluster_name}.yaml"


def stacks_text(fleet: Path, stacks: Stacks) -> str:
    return dumps(inventory(stacks), f"the stacks synthesized from {relative(fleet)}")


def cluster_text(fleet: Path, tree: ClusterTree) -> str:
    return dumps(cluster(tree), f"what Argo CD applies to {tree.cluster}, built from {relative(fleet)}")


def synthesized(fleet: Path) -> Stacks:
    with tempfile.TemporaryDirectory(prefix="inventory-") as tmp:
        return synth(fleet, Path(tmp) / "cdktf.out", backend="local")


def built(fleet: Path) -> list[ClusterTree]:
    """Every cluster's tree rendered from the fleet (as `make generate` would) and built."""
    trees = built_trees(REPO, load(fleet), KUBECTL)
    problems = [str(f) for _, findings in trees for f in findings]
    if problems:  # kubectl missing, or an overlay kustomize refuses
        raise Invalid([f"{relative(fleet)}: its rendered trees do not build ({'; '.join(problems)}); fix that first"])
    return [tree for tree, _ in trees]


def expected(fleet: Path) -> dict[Path, str]:
    """Every inventory file of one fleet, as the code makes it now."""
    files = {infra_file(fleet): stacks_text(fleet, synthesized(fleet))}
    files |= {cluster_file(fleet, tree.cluster): cluster_text(fleet, tree) for tree in built(fleet)}
    return files


def committed(folders: Iterable[Path] = (INFRA, GITOPS)) -> set[Path]:
    return {path for folder in folders for path in folder.rglob("*.yaml")}


def difference(path: Path, text: str) -> str:
    """Empty when the committed file holds `text`; else a unified diff (committed -> now) and what to do."""
    if not path.is_file():
        return f"{relative(path)}: no inventory is written down for this plan; run `{WRITE}` and commit it"
    old = path.read_text(encoding="utf-8")
    if old == text:
        return ""
    diff = difflib.unified_diff(
        old.splitlines(keepends=True), text.splitlines(keepends=True), f"{relative(path)} (committed)", "now"
    )
    return (
        "".join(diff)
        + f"\n{relative(path)}: the plan differs from its inventory; if the change is meant, run `{WRITE}` "
        "and commit the inventory with it"
    )
