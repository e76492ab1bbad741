"""Every command of the runbooks (platform/fleet/runbooks/), checked the way the README test checks the READMEs'.

They act on a live cluster, so none runs here: a `warden` line must parse with Warden's own CLI (the
commands themselves run against a fake API server in tests/warden/test_person.py); a `kubectl` line
must use a verb kubectl has, and the namespace and the Warden/Kueue objects it names must exist in
the rendered tree; `curl` and the shell's own lines are classified as such. Any other command fails.
Namespaces named in `kubectl -n ...` anywhere in the READMEs are checked against the tree too.
"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from contract import names
from tests.conftest import REPO
from tests.newcomer.test_readmes import READMES, sh_commands
from warden.cli import _parser as warden_parser

RUNBOOKS = sorted((REPO / "platform" / "fleet" / "runbooks").glob("*.md"))
KUBECTL_VERBS = {"get", "describe", "logs", "exec", "port-forward", "delete", "scale", "rollout", "patch"}
TEAM_NS = re.compile(r'^(team-[a-z0-9-]+|"\$NS"|"\$WL_NS")$')  # a team's, or one the page's variables name


def rendered() -> tuple[set[str], set[tuple[str, str, str]]]:
    """Namespaces, and (kind, namespace, name) of every object, in the first cluster's rendered tree."""
    spaces, objects = set(), set()
    for path in (REPO / "kustomize" / "overlays" / "meridian-us-east4").rglob("*.yaml"):
        for o in yaml.safe_load_all(path.read_text()):
            if isinstance(o, dict) and "metadata" in o:
                meta = o["metadata"]
                objects.add((o.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")))
                if o.get("kind") == "Namespace":
                    spaces.add(meta["name"])
    for base in (REPO / "kustomize" / "base").iterdir():  # the bases the overlays build on, in their namespace
        home = (yaml.safe_load((base / "kustomization.yaml").read_text()) or {}).get("namespace", "")
        for path in base.glob("*.yaml"):
            for o in yaml.safe_load_all(path.read_text()):
                if isinstance(o, dict) and "metadata" in o and o.get("kind") != "Kustomization":
                    meta = o["metadata"]
                    objects.add((o.get("kind", ""), meta.get("namespace", home), meta.get("name", "")))
                    if o.get("kind") == "Namespace":
                        spaces.add(meta["name"])
    # Argo CD applications' destinations (charts such as Kueue's create their namespace at sync).
    for path in (REPO / "argocd" / "clusters" / "meridian-us-east4").rglob("*.yaml"):
        for o in yaml.safe_load_all(path.read_text()):
            if isinstance(o, dict) and o.get("kind") == "Application":
                spaces.add(o["spec"]["destination"].get("namespace", ""))
    objects.add(("Lease", names.WARDEN_NAMESPACE, "warden"))  # Warden's leader election writes it at run time
    return spaces, objects


SPACES, OBJECTS = rendered()
KINDS = {"deploy": "Deployment", "deployment": "Deployment", "lease": "Lease", "podmonitoring": "PodMonitoring"}


def kubectl_problems(words: list[str]) -> list[str]:
    problems = []
    namespace = words[words.index("-n") + 1] if "-n" in words else ""
    if namespace and namespace not in SPACES and not TEAM_NS.match(namespace):
        problems.append(f"namespace {namespace} is not in the rendered tree")
    values = {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-n", "--context")}  # flags' values
    verb = next((w for w in words[1:] if not w.startswith("-") and w not in values), "")
    if verb not in KUBECTL_VERBS:
        problems.append(f"verb {verb!r}")
    for i, word in enumerate(words):  # deploy/warden, or `lease warden`: the object must exist
        kind, _, name = word.partition("/")
        if not name and i > 0 and words[i - 1] in ("get", "scale", "restart") and i + 1 < len(words):
            kind, name = word, words[i + 1]
        ours = namespace == names.WARDEN_NAMESPACE and not name.startswith(('"', "$"))
        if kind in KINDS and name and ours and (KINDS[kind], namespace, name) not in OBJECTS:
            problems.append(f"{KINDS[kind]} {namespace}/{name} is not in the rendered tree")
    return problems


def problems(command: str) -> list[str]:
    words = shlex.split(command, posix=False)
    head = words[0]
    if "=" in head and head.split("=", 1)[0].isupper():  # NS=... RUN=...: the variables from the alert
        return []
    if head == "kubectl":
        return kubectl_problems(words)
    if head == "warden":
        try:
            warden_parser().parse_args([w.strip("\"'") for w in words[1:]])
        except SystemExit:
            return ["does not parse with warden's CLI"]
        return []
    if head == "curl":
        return [] if "localhost:" in command else ["curl to somewhere other than a port-forward"]
    return [f"unclassified command {head!r}"]


def test_every_runbook_has_commands() -> None:
    assert len(RUNBOOKS) == 11  # ten alerts and the index
    for page in RUNBOOKS:
        if page.name != "README.md":
            assert sh_commands(page.read_text()), page.name


@pytest.mark.parametrize("page", [p.name for p in RUNBOOKS if p.name != "README.md"])
def test_runbook_commands_resolve(page: str) -> None:
    text = (REPO / "platform" / "fleet" / "runbooks" / page).read_text()
    found = {c: p for c in sh_commands(text) if (p := problems(c))}
    assert found == {}


def test_the_checker_refuses_what_would_fail() -> None:
    assert problems("kubectl -n meridian-system port-forward deploy/warden 9090") == [
        "namespace meridian-system is not in the rendered tree"
    ]
    assert problems("kubectl -n warden get lease wardn -o yaml") == ["Lease warden/wardn is not in the rendered tree"]
    assert problems("warden hold NODE") == ["does not parse with warden's CLI"]  # --reason is required
    assert problems("kubectl -n warden frobnicate pods") == ["verb 'frobnicate'"]
    assert problems('kubectl --context "$CONTEXT" -n warden frobnicate pods') == ["verb 'frobnicate'"]


@pytest.mark.parametrize("readme", [*READMES, *(p.relative_to(REPO).as_posix() for p in RUNBOOKS)])
def test_every_kubectl_namespace_in_the_docs_exists(readme: str) -> None:
    text = (REPO / readme).read_text(encoding="utf-8")
    named = set(re.findall(r"kubectl (?:--context \S+ )?-n ([a-z0-9-]+)", text))
    assert {n for n in named if n not in SPACES and not TEAM_NS.match(n)} == set()
