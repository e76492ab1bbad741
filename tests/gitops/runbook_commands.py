"""The runbooks' commands as data: a small pure parser of the shell lines an operator pastes.

A page (platform/fleet/runbooks/<Alert>.md) holds ```sh blocks; a block whose first line is `# when: ...`
applies only to the runs that condition names. Each line is one of:

- an assignment of literals, `CLUSTER=... NS=...` (the first one: the alert's labels; later ones: values the
  operator picks from an earlier command's output);
- an assignment of one command's output, `VAR=$(kubectl ...)`, or of a kubeconfig context,
  `VAR=$(kubectl config get-contexts -o name | grep -x "PATTERN" || echo "...")`;
- a `kubectl`, `warden` or `curl` command.

`requests()` says which API requests a kubectl command makes, as the RBAC authorizer sees them
(https://kubernetes.io/docs/reference/access-authn-authz/authorization/#determine-the-request-verb: GET of one
object is get, of a collection list, POST create, PATCH patch, DELETE delete; subresources as in
https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources). Where kubectl may or may
not read an object first, the read is counted: a page must work either way.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from tests.tenancy.rbac import Access

WHEN = "# when:"
VARIABLE = re.compile(r"\$\{?([A-Z_]+)\}?")
ASSIGN_OUTPUT = re.compile(r"^([A-Z_]+)=\$\((.*)\)$")
CONTEXT_PICK = re.compile(r'^kubectl config get-contexts -o name \| grep -x "([^"]+)" \|\| echo "([^"]+)"$')
# Flags that take a value (as the next word or after `=`); every other flag is a switch.
VALUED = {
    "--context", "-n", "--namespace", "-l", "--selector", "-o", "--output", "--field-selector", "-L",
    "--label-columns", "--tail", "--type", "-p", "--patch", "--replicas", "--sort-by", "--reason",
}  # fmt: skip
# kubectl's names for the kinds the pages use: (API group, resource, namespaced).
KINDS = {
    "pods": ("", "pods", True),
    "nodes": ("", "nodes", False),
    "events": ("", "events", True),
    "configmaps": ("", "configmaps", True),
    "deployments": ("apps", "deployments", True),
    "leases": ("coordination.k8s.io", "leases", True),
    "podmonitorings": ("monitoring.googleapis.com", "podmonitorings", True),
    "clusterqueues": ("kueue.x-k8s.io", "clusterqueues", False),
    "workloads": ("kueue.x-k8s.io", "workloads", True),
    "applications": ("argoproj.io", "applications", True),
    "rayjobs": ("ray.io", "rayjobs", True),
}
ALIASES = {"po": "pods", "pod": "pods", "node": "nodes", "no": "nodes", "ev": "events", "event": "events"} | {
    "deploy": "deployments", "deployment": "deployments", "lease": "leases", "podmonitoring": "podmonitorings",
    "clusterqueue": "clusterqueues", "workload": "workloads", "application": "applications", "app": "applications",
    "rayjob": "rayjobs", "configmap": "configmaps", "cm": "configmaps",
}  # fmt: skip
# What each verb changes: the object itself (whole) or a subresource of it.
MUTATING = {"scale", "patch", "delete", "edit", "annotate", "label", "set", "rollout", "apply", "replace", "cordon"}


@dataclass(frozen=True)
class Block:
    when: str  # "" for every run; else the condition after `# when:`
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Command:
    tool: str  # kubectl, warden, curl
    context: str | None  # the --context value as written ("$CONTEXT")
    namespace: str | None
    all_namespaces: bool
    verb: str
    args: tuple[str, ...]  # positional words after the verb
    flags: dict[str, str] = field(default_factory=dict)

    @property
    def selector(self) -> str | None:
        return self.flags.get("-l") or self.flags.get("--selector")


def blocks(markdown: str) -> list[Block]:
    """Every ```sh block: continuation lines joined, comment lines dropped (a leading `# when:` kept aside)."""
    found = []
    for body in re.findall(r"^```sh\n(.*?)^```", markdown, re.S | re.M):
        lines = [re.sub(r"\s+", " ", line).strip() for line in re.sub(r"\\\n\s*", "", body).splitlines()]
        lines = [line for line in lines if line]
        when = lines[0][len(WHEN) :].strip() if lines and lines[0].startswith(WHEN) else ""
        kept = tuple(re.sub(r"\s+#\s.*$", "", line) for line in lines if not line.startswith("#"))
        found.append(Block(when, kept))
    return found


def literal_assignments(line: str) -> dict[str, str] | None:
    """`A=x B="y"` as {A: x, B: y}; None when the line is not only literal assignments."""
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    pairs = [w.partition("=") for w in words]
    if not words or any(not (sep and re.fullmatch(r"[A-Z_]+", name)) or "$(" in v for name, sep, v in pairs):
        return None
    return {name: value for name, _, value in pairs}


def output_assignment(line: str) -> tuple[str, str] | None:
    """`VAR=$(command)` as (VAR, command); None otherwise."""
    found = ASSIGN_OUTPUT.match(line)
    return (found.group(1), found.group(2)) if found else None


def context_pick(command: str) -> tuple[str, str] | None:
    """The grep pattern and the fallback of a kubeconfig context pick; None for any other command."""
    found = CONTEXT_PICK.match(command)
    return (found.group(1), found.group(2)) if found else None


def substitute(text: str, values: dict[str, str]) -> str:
    """`$VAR`/`${VAR}` replaced by its value; KeyError names a variable the page never set."""
    return VARIABLE.sub(lambda m: values[m.group(1)], text)


def parse(line: str) -> Command:
    """One kubectl, warden or curl command (shell quoting removed, variables left as written)."""
    words = shlex.split(line)
    flags: dict[str, str] = {}
    positional: list[str] = []
    i = 1
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if word.startswith("-") and eq and name in VALUED:
            flags[name] = value
        elif word in VALUED:
            flags[word] = words[i + 1] if i + 1 < len(words) else ""
            i += 1
        elif word.startswith("-"):
            flags[word] = ""
        else:
            positional.append(word)
        i += 1
    verb, *args = positional or [""]
    namespace = flags.get("-n") or flags.get("--namespace")
    all_ns = "-A" in flags or "--all-namespaces" in flags
    return Command(words[0], flags.get("--context"), namespace, all_ns, verb, tuple(args), flags)


def target(command: Command) -> tuple[str, str]:
    """(resource, name) a kubectl command acts on: `deploy/x`, `pod x`, `pod/x` or a pod's bare name."""
    if not command.args:
        return ("pods", "") if command.verb == "logs" else ("", "")  # `logs -l ...`: the pods it selects
    first, rest = command.args[0], command.args[1:]
    kind, slash, name = first.partition("/")
    if slash:
        return ALIASES.get(kind, kind), name
    if command.verb in ("logs", "port-forward"):
        return "pods", first
    return ALIASES.get(kind, kind), rest[0] if rest else ""


def _access(verb: str, resource: str, namespace: str | None, name: str = "", sub: str = "") -> Access:
    group, plural, namespaced = KINDS[resource]
    return Access(verb, group, f"{plural}/{sub}" if sub else plural, namespace or "" if namespaced else "", name)


def _pod_of(resource: str, name: str, ns: str | None, selector: str | None) -> list[Access]:
    """The requests that find the pod a logs or port-forward command reaches (its name, if known)."""
    if selector is not None:
        return [_access("list", "pods", ns)]
    if resource == "pods":
        return [_access("get", "pods", ns, name)]
    # deploy/x: the Deployment, then a pod its selector matches (polymorphichelpers.AttachablePodForObject)
    return [_access("get", resource, ns, name), _access("list", "pods", ns), _access("get", "pods", ns)]


def requests(command: Command) -> list[Access]:
    """The API requests of one kubectl command; ValueError for a verb or kind this model does not know."""
    ns = None if command.all_namespaces else command.namespace
    resource, name = target(command)
    if command.verb == "config":
        return []  # the local kubeconfig
    if resource not in KINDS:
        raise ValueError(f"{command.verb} {resource!r}: a kind tests/gitops/runbook_commands.py does not know")
    pod = name if resource == "pods" else ""
    match command.verb:
        case "get":
            listing = not name or command.selector is not None
            return [_access("list" if listing else "get", resource, ns, "" if listing else name)]
        case "describe":
            return [_access("get", resource, ns, name), _access("list", "events", ns)]
        case "logs":
            return [*_pod_of(resource, name, ns, command.selector), _access("get", "pods", ns, pod, "log")]
        case "port-forward":  # WebSocket (GET: get), or SPDY (POST: create) when the server has no WebSocket
            forward = [_access(v, "pods", ns, pod, "portforward") for v in ("get", "create")]
            return [*_pod_of(resource, name, ns, None), *forward]
        case "delete":  # then kubectl waits until it is gone (kubectl wait --for=delete: a list, then a watch)
            waits = [_access("list", resource, ns), _access("watch", resource, ns)]
            return [_access("delete", resource, ns, name), *waits]
        case "scale":
            return [_access("get", resource, ns, name), _access("patch", resource, ns, name, "scale")]
        case "patch":
            return [_access("get", resource, ns, name), _access("patch", resource, ns, name)]
    raise ValueError(f"kubectl {command.verb}: a verb tests/gitops/runbook_commands.py does not model")


def warden_requests(command: Command) -> list[Access]:
    """`warden held` lists Nodes; `hold/release/report NODE` reads and patches one (warden/cli.py _person)."""
    if command.verb == "held":
        return [Access("list", "", "nodes")]
    node = command.args[0] if command.args else ""
    return [Access("get", "", "nodes", name=node), Access("patch", "", "nodes", name=node)]


def changed_pointers(command: Command) -> list[str] | None:
    """The JSON pointers a mutating command writes; None: the whole object (a delete) or unknown."""
    if command.verb == "scale":
        return ["/spec/replicas"]
    if command.verb == "patch" and command.flags.get("--type") == "merge":
        return _leaves(json.loads(command.flags.get("-p") or command.flags.get("--patch") or "{}"), "")
    return None


def _leaves(value: object, prefix: str) -> list[str]:
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in _leaves(v, f"{prefix}/{k}")]
    return [prefix]


def matches(selector: str, labels: dict[str, str]) -> bool:
    """A kubectl label selector (`k=v`, `k!=v`, `k`, `!k`, comma-separated: all must hold) against labels."""
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def jsonpath(obj: dict[str, object], path: str) -> str:
    """kubectl's `{.a.b\\.c}` for a dotted path of map keys (an escaped dot is part of a key); "" when absent."""
    keys = [k.replace("\\.", ".") for k in re.split(r"(?<!\\)\.", path.strip("{}").lstrip("."))]
    found: object = obj
    for key in keys:
        found = found.get(key, "") if isinstance(found, dict) else ""
    return str(found)
