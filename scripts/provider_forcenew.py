"""Which attributes force replacement, read from the Google provider's Go source.

Reads the resource files of the types the plan review guards from a git directory of
hashicorp/terraform-provider-google and writes, per resource type, every attribute path
whose schema says `ForceNew: true` (nested blocks by dotted path; shared schema functions
such as node_config.go's `schemaNodeConfig` are followed where they are embedded), the
attributes that CustomizeDiff forces new only on some changes, and ForceNew blocks (SDKv2
applies a block's ForceNew to adding or removing it, not to the fields inside, which carry
their own). Standard library only.

    python scripts/provider_forcenew.py [--git-dir DIR] [--out FILE] [--check]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MIRROR = Path("/work/.mirror/hashicorp+terraform-provider-google/repo")
OUT = REPO / "platform/review/src/review/provider_forcenew.json"
LOCK = REPO / "requirements/dev.lock"
PACKAGE = "cdktn-provider-google"
CONTAINER = "google/services/container"
# type -> (file, function returning its *schema.Resource); files of one Go package share definitions.
RESOURCES = {
    "google_container_cluster": (f"{CONTAINER}/resource_container_cluster.go", "ResourceContainerCluster"),
    "google_container_node_pool": (f"{CONTAINER}/resource_container_node_pool.go", "ResourceContainerNodePool"),
    "google_compute_subnetwork": (
        "google/services/compute/resource_compute_subnetwork.go",
        "ResourceComputeSubnetwork",
    ),
    "google_compute_network": ("google/services/compute/resource_compute_network.go", "ResourceComputeNetwork"),
    "google_storage_bucket": ("google/services/storage/resource_storage_bucket.go", "ResourceStorageBucket"),
}
SHARED = [f"{CONTAINER}/node_config.go"]  # schemaNodeConfig and friends, embedded in cluster and node pool

_TOKEN = re.compile(
    r"""(?P<skip>\s+|//[^\n]*|/\*.*?\*/)
      | (?P<string>"(?:\\.|[^"\\\n])*"|`[^`]*`|'(?:\\.|[^'\\\n])+')
      | (?P<word>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
      | (?P<number>\d[\w.]*)
      | (?P<op>:=|\.\.\.|&&|\|\||[=!<>]=|<-|[-+*/%&|^<>=!.,;:(){}\[\]])""",
    re.X | re.S,
)
_CLOSE = {"(": ")", "{": "}", "[": "]"}


class SourceError(Exception):
    pass


@dataclass
class Group:
    """A bracketed run of tokens: `(...)`, `{...}` or `[...]`."""

    open: str
    items: list[Item] = field(default_factory=list)


Item = str | Group


def tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise SourceError(f"cannot read Go source at offset {pos}: {text[pos : pos + 30]!r}")
        if match.lastgroup != "skip":
            out.append(match.group())
        pos = match.end()
    return out


def tree(words: list[str]) -> list[Item]:
    stack: list[Group] = [Group("")]
    for word in words:
        if word in _CLOSE:
            stack.append(Group(word))
        elif word in _CLOSE.values():
            group = stack.pop()
            if _CLOSE.get(group.open) != word:
                raise SourceError(f"unbalanced {group.open!r} closed by {word!r}")
            stack[-1].items.append(group)
        else:
            stack[-1].items.append(word)
    if len(stack) != 1:
        raise SourceError("unbalanced brackets at end of file")
    return stack[0].items


def split(items: list[Item], sep: str = ",") -> list[list[Item]]:
    parts: list[list[Item]] = [[]]
    for item in items:
        if item == sep:
            parts.append([])
        else:
            parts[-1].append(item)
    return [p for p in parts if p]


def fields(group: Group) -> dict[str, list[Item]]:
    """`Key: value, ...` of a composite literal (keys are words or string literals)."""
    out = {}
    for part in split(group.items):
        if len(part) >= 3 and isinstance(part[0], str) and part[1] == ":":
            out[part[0]] = part[2:]
    return out


@dataclass
class Package:
    """Top-level `var` values and the return values of argument-less functions, by name."""

    values: dict[str, list[Item]] = field(default_factory=dict)
    bodies: dict[str, Group] = field(default_factory=dict)  # function name -> its body

    def add(self, items: list[Item]) -> None:
        starts = [i for i, it in enumerate(items) if it in ("func", "var", "type", "const", "import")]
        for start, end in zip(starts, [*starts, len(items)][1:], strict=True):
            decl = items[start:end]
            if decl[0] == "var":
                body = decl[1].items if isinstance(decl[1], Group) else decl[1:]
                names = [i for i, it in enumerate(body) if i + 1 < len(body) and body[i + 1] == "="]
                for n, nxt in zip(names, [*names, len(body)][1:], strict=True):
                    self.values[str(body[n])] = body[n + 2 : nxt]
            elif decl[0] == "func" and isinstance(decl[1], str) and isinstance(decl[-1], Group):
                self.bodies[decl[1]] = decl[-1]
                params = decl[2]
                if isinstance(params, Group) and not params.items:
                    returns = [i for i, it in enumerate(decl[-1].items) if it == "return"]
                    if len(returns) == 1:
                        self.values[f"{decl[1]}()"] = decl[-1].items[returns[0] + 1 :]


@dataclass
class Found:
    force_new: set[str] = field(default_factory=set)
    blocks: set[str] = field(default_factory=set)
    unresolved: set[str] = field(default_factory=set)


def _name(expr: list[Item]) -> str | None:
    """`x` or `f()`: the key under which Package holds its value."""
    if len(expr) == 1 and isinstance(expr[0], str):
        return expr[0]
    if len(expr) == 2 and isinstance(expr[0], str) and isinstance(expr[1], Group) and not expr[1].items:
        return f"{expr[0]}()"
    return None


def _literal(pkg: Package, expr: list[Item], kind: str) -> Group | None:
    """The `{...}` of `&schema.<kind>{...}` / a bare `{...}`, following local names and calls."""
    seen = 0
    while (name := _name(expr)) in pkg.values and seen < 20:
        expr, seen = pkg.values[str(name)], seen + 1
    if expr and expr[0] == "&":
        expr = expr[1:]
    if len(expr) == 1 and isinstance(expr[0], Group) and expr[0].open == "{":
        return expr[0]
    if len(expr) == 2 and expr[0] == f"schema.{kind}" and isinstance(expr[1], Group):
        return expr[1]
    return None


def schema_map(pkg: Package, expr: list[Item], prefix: str, found: Found) -> None:
    """Walk a `map[string]*schema.Schema{...}` (or a name, call or MergeSchemas of such maps)."""
    while (name := _name(expr)) in pkg.values:
        expr = pkg.values[str(name)]
    if len(expr) == 2 and expr[0] == "tpgresource.MergeSchemas" and isinstance(expr[1], Group):
        for part in split(expr[1].items):
            schema_map(pkg, part, prefix, found)
        return
    if not (expr and expr[0] == "map" and isinstance(expr[-1], Group) and expr[-1].open == "{"):
        found.unresolved.add(f"{prefix or '(root)'}: {' '.join(str(i) for i in expr if isinstance(i, str))}")
        return
    for key, value in fields(expr[-1]).items():
        name = json.loads(key) if key.startswith('"') else key
        attribute(pkg, value, f"{prefix}{name}", found)


def attribute(pkg: Package, expr: list[Item], path: str, found: Found) -> None:
    literal = _literal(pkg, expr, "Schema")
    if literal is None:
        found.unresolved.add(f"{path}: {' '.join(str(i) for i in expr if isinstance(i, str))}")
        return
    spec = fields(literal)
    resource = _literal(pkg, spec["Elem"], "Resource") if "Elem" in spec else None
    if spec.get("ForceNew") == ["true"]:
        (found.blocks if resource is not None else found.force_new).add(path)
    if resource is not None and "Schema" in (inner := fields(resource)):
        schema_map(pkg, inner["Schema"], f"{path}.", found)


def _calls(items: list[Item], function: str) -> list[tuple[str, str]]:
    """(call, first string argument) of every `customdiff.ForceNewIfChange` / `<x>.ForceNew` call, nested too."""
    out = []
    for i, item in enumerate(items):
        if isinstance(item, Group):
            out += _calls(item.items, function)
        elif (
            (item == "customdiff.ForceNewIfChange" or item.endswith(".ForceNew"))
            and i + 1 < len(items)
            and isinstance(group := items[i + 1], Group)
            and group.items
            and isinstance(first := group.items[0], str)
            and first.startswith('"')
        ):
            args = split(group.items)
            why = str(args[1][0]) if item == "customdiff.ForceNewIfChange" and len(args) > 1 else function
            out.append((re.sub(r"\.\d+(?=\.|$)", "", json.loads(first)), why))
    return out


def _words(items: list[Item]) -> set[str]:
    return {w for i in items for w in (_words(i.items) if isinstance(i, Group) else {i})}


def git_show(git_dir: Path, *args: str) -> str:
    result = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SourceError(f"{git_dir}: git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def extract(
    read: Callable[[str], str],
    resources: dict[str, tuple[str, str]] = RESOURCES,
    shared: list[str] = SHARED,
) -> dict[str, Any]:
    """Per resource type: sorted ForceNew paths, ForceNew blocks, conditional ForceNew, what could not be read.

    `read` gives a file's Go source by its path in the provider repository.
    """
    packages: dict[str, Package] = {}
    for path in sorted({f for f, _ in resources.values()} | set(shared)):
        packages.setdefault(path.rsplit("/", 1)[0], Package()).add(tree(tokens(read(path))))
    out: dict[str, Any] = {"force_new": {}, "force_new_blocks": {}, "force_new_if": {}, "unresolved": {}}
    for kind, (path, function) in resources.items():
        pkg = packages[path.rsplit("/", 1)[0]]
        resource = _literal(pkg, [f"{function}()"], "Resource")
        if resource is None or "Schema" not in fields(resource):
            raise SourceError(f"{path}: no `return &schema.Resource{{Schema: ...}}` in {function}()")
        found = Found()
        schema_map(pkg, fields(resource)["Schema"], "", found)
        conditional = set(_calls(resource.items, function))
        used = _words(resource.items)
        for name, body in pkg.bodies.items():  # CustomizeDiff functions that call d.ForceNew(...)
            if name != function and name in used:
                conditional |= set(_calls(body.items, name))
        out["force_new"][kind] = sorted(found.force_new)
        out["force_new_blocks"][kind] = sorted(found.blocks)
        out["force_new_if"][kind] = [{"path": p, "condition": c} for p, c in sorted(conditional)]
        out["unresolved"][kind] = sorted(found.unresolved)
    return out


def source_version(git_dir: Path) -> str:
    """The release whose merge the snapshot's history holds last ("Merge feature branch major release 8.0.0")."""
    subject = git_show(git_dir, "log", "-1", "--format=%s", "--grep=major release [0-9]", "HEAD")
    match = re.search(r"major release (\d+\.\d+\.\d+)", subject)
    if not match:
        raise SourceError(f"{git_dir}: no release merge in its history; check out a release and rerun")
    return match.group(1)


def pinned() -> dict[str, str]:
    """The lock's cdktn-provider-google and the Google provider version that package is built for."""
    lock = re.search(rf"^{PACKAGE}==(\S+)", LOCK.read_text(encoding="utf-8"), re.M)
    if not lock:
        raise SourceError(f"{LOCK}: no {PACKAGE}== pin")
    installed = metadata.version(PACKAGE)
    if installed != lock.group(1):
        raise SourceError(f"{PACKAGE} {installed} is installed, the lock pins {lock.group(1)}: run `make setup`")
    summary = metadata.metadata(PACKAGE).get_payload()  # type: ignore[attr-defined]
    provider = re.search(r"hashicorp/google provider version (\d+\.\d+\.\d+)", str(summary))
    if not provider:
        raise SourceError(f"{PACKAGE} {installed}: its description names no hashicorp/google provider version")
    return {"package": PACKAGE, "package_version": installed, "provider_version": provider.group(1)}


def document(git_dir: Path) -> dict[str, Any]:
    commit = git_show(git_dir, "rev-parse", "HEAD").strip()
    version = source_version(git_dir)
    pin = pinned()
    note = ""
    if version != pin["provider_version"]:
        note = (
            f"Read from provider source {version} (commit {commit[:10]}); the lock pins {pin['package']} "
            f"{pin['package_version']}, built for provider {pin['provider_version']}: attributes whose ForceNew "
            f"changed between {version} and {pin['provider_version']} are not reflected. A real plan decides."
        )
    return {
        "generated_by": "scripts/provider_forcenew.py (do not edit; rerun it)",
        "source": {
            "repository": "hashicorp/terraform-provider-google",
            "commit": commit,
            "version": version,
            "files": sorted({f for f, _ in RESOURCES.values()} | set(SHARED)),
        },
        "pinned": pin,
        "note": note,
        **extract(lambda path: git_show(git_dir, "show", f"{commit}:{path}")),
    }


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--git-dir", type=Path, default=MIRROR, help="a (bare) clone of terraform-provider-google")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 when --out differs from what the source gives")
    args = parser.parse_args(argv)
    try:
        text = render(document(args.git_dir))
    except (SourceError, OSError, metadata.PackageNotFoundError) as error:
        print(f"provider_forcenew: {error}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        if current != text:
            print(f"{args.out}: stale; run python scripts/provider_forcenew.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
