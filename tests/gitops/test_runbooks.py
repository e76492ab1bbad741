"""Every runbook page, followed as the on-call would follow it, against what the fleet renders (issue 38).

For each alert, each page is walked (tests/gitops/runbook_commands.py parses its lines) with the labels the alert
would carry: for a run's alert, those of a trainer pod of each example job (one region under Ray, across regions,
RL, a plain Job; tests/gitops/runbook_world.py) in each cluster it runs in; for the others, each cluster's. Then:

- every label selector selects pods of the alert's job only, and one selects all of them (`meridian.dev/run`
  is on a run across regions only; a run's name is the team's config, no pod label); node selectors the
  alert's pool; Warden's pods Warden's;
- every command names its cluster (`--context`), picked from the alert's `cluster` label, and every
  Deployment a command names exists in that cluster;
- every request is allowed by the RBAC the committed tree binds to `project.operators_group`, and every right
  bound to it is used by a page, `warden hold/release/report/held` or `gkr health` (least privilege); every patch
  of an Argo CD Application is admitted by the tree's admission policies (fleet.gitops.operators.sync_guard);
- a command that changes an object Argo CD manages (self-heal on) comes after a pause of that application's
  automated sync and before its resumption, unless the owning application ignores exactly that field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from contract import names
from fleet.gitops.admission import policies
from fleet.gitops.argocd import PAUSE_POINTER
from fleet.gitops.check import ClusterTree
from fleet.gitops.monitoring import queries, rules
from fleet.gitops.monitoring.scrape import JOB
from fleet.gitops.validate import Finding
from fleet.model import Fleet
from gkr import health_read
from tests.conftest import REPO
from tests.gitops import runbook_commands as rc
from tests.gitops import runbook_world as world
from tests.tenancy import applications
from tests.tenancy.rbac import Access, User, allowed
from tests.tenancy.vap import admit

Trees = dict[str, tuple[ClusterTree, list[Finding]]]
RUNBOOKS = REPO / "platform" / "fleet" / "runbooks"
PAGES = {p.stem: p.read_text(encoding="utf-8") for p in sorted(RUNBOOKS.glob("*.md")) if p.name != "README.md"}
ALERTS = {a.name: a for a in rules.ALERTS}
# A page's first line sets these from the alert's labels (runbooks/README.md, "Variables and the cluster").
ALERT_VARIABLES = {
    "CLUSTER": "cluster",
    "NS": "namespace",
    "JOB": JOB,
    "RUN": "run",
    "POD": "pod",
    "POOL": "pool",
    "CQ": "cluster_queue",
}
PICKED = ("NODE", "WL_NS", "WL")  # from an earlier command's output
RUN_ALERTS = sorted(a for a in ALERTS if "run" in (queries.alert_labels(ALERTS[a].expr) or ()))  # about a run
CLUSTER_ALERTS = sorted(set(ALERTS) - set(RUN_ALERTS))
WHEN = {
    "one region, under Ray": lambda pod: world.RAY_NODE_TYPE in pod.labels and names.RUN_LABEL not in pod.labels,
    "across regions": lambda pod: names.RUN_LABEL in pod.labels,
}
KIND_OF = {"deployments": "Deployment", "applications": "Application", "pods": "Pod", "nodes": "Node"}


@dataclass
class Step:
    raw: rc.Command  # as the page writes it
    command: rc.Command  # with the variables' values
    context: str  # the --context value
    when: str


@dataclass
class Walk:
    page: str
    labels: dict[str, str]
    pod: world.Pod | None
    values: dict[str, str] = field(default_factory=dict)
    picked_contexts: set[str] = field(default_factory=set)  # variables bound by a kubeconfig context pick
    steps: list[Step] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def alert_context(labels: dict[str, str]) -> str:
    return next(c for c, name in world.contexts().items() if name == labels["cluster"])


def region_of(context: str) -> str | None:
    """The region whose cluster the context reaches; None for a context no region has (a failed pick)."""
    return next((r.name for r in world.registry().regions if world.registry().context(r) == context), None)


def cluster_pods(trees: Trees, context: str) -> list[world.Pod]:
    """Every pod in the cluster: the example jobs' and the committed tree's workloads'."""
    region = region_of(context)
    if region is None:
        return []
    tree, _ = trees[region]
    return [p for _, o in tree.objects() for p in world.pods_of(context, o)] + [
        p for p in world.job_pods() if p.context == context
    ]


def _output(walk: Walk, trees: Trees, line: str, when: str, var: str, command: str) -> str:
    """What `VAR=$(command)` binds: a kubeconfig context, a pod's name, or one annotation of a pod."""
    if (pick := rc.context_pick(command)) is not None:
        pattern, fallback = (rc.substitute(p, walk.values) for p in pick)
        found = [c for c in world.contexts() if re.fullmatch(pattern, c)]
        if len(found) != 1:
            walk.problems.append(f"{line}: {pattern} picks {found} of {sorted(world.contexts())}")
        walk.picked_contexts.add(var)
        return found[0] if len(found) == 1 else fallback
    step = _step(walk, line, command, when)
    pods = [p for p in cluster_pods(trees, step.context) if p.namespace == step.command.namespace]
    if step.command.selector is not None and step.command.flags.get("-o") == "name":
        chosen = [p for p in pods if rc.matches(step.command.selector, p.labels)]
        return f"pod/{chosen[0].obj['metadata']['name']}" if chosen else ""
    path = step.command.flags.get("-o", "").removeprefix("jsonpath=")
    pod = next((p for p in pods if p.obj["metadata"]["name"] == rc.target(step.command)[1]), None)
    if pod is None or not path:
        walk.problems.append(f"{line}: no pod {rc.target(step.command)} to read {path!r} from")
        return ""
    return rc.jsonpath(pod.obj, path)


def _step(walk: Walk, line: str, text: str, when: str) -> Step:
    raw = rc.parse(text)
    try:
        command = rc.parse(rc.substitute(text, walk.values))
    except KeyError as unset:
        walk.problems.append(f"{line}: uses {unset} before the page sets it")
        command = raw
    # A command without --context acts on whatever context is current: judged in the alert's cluster here (its
    # selectors and rights), and refused by test_every_command_names_the_alerts_cluster.
    step = Step(raw, command, command.context or alert_context(walk.labels), when)
    walk.steps.append(step)
    return step


def _assign(walk: Walk, line: str, values: dict[str, str], first: bool, picked: dict[str, str]) -> None:
    for var in values:
        if first and (label := ALERT_VARIABLES.get(var)) in walk.labels:
            walk.values[var] = walk.labels[str(label)]
        elif not first and var in PICKED:
            walk.values[var] = picked[var]
        else:
            walk.problems.append(f"{line}: {var} is neither a label of the alert nor a value picked from output")


def walk_page(page: str, labels: dict[str, str], pod: world.Pod | None, trees: Trees, picked: dict[str, str]) -> Walk:
    """Follow the page for one alert instance: bind its variables, resolve and record every command."""
    walk = Walk(page, labels, pod)
    first = True
    for block in rc.blocks(PAGES[page]):
        if block.when and (block.when not in WHEN or pod is None or not WHEN[block.when](pod)):
            walk.problems += [] if block.when in WHEN else [f"{page}: unknown condition '# when: {block.when}'"]
            continue
        for line in block.lines:
            if (values := rc.literal_assignments(line)) is not None:
                _assign(walk, line, values, first, picked)
            elif (assigned := rc.output_assignment(line)) is not None:
                walk.values[assigned[0]] = _output(walk, trees, line, block.when, *assigned)
            else:
                _step(walk, line, line, block.when)
            first = False
    return walk


def run_scenarios() -> Iterator[tuple[str, world.Pod]]:
    """(example, one trainer pod) for each cluster each example job runs in."""
    for example in world.JOB_EXAMPLES:
        jobs = {world.job_of(p) for c, o in world.rendered(example) for p in world.pods_of(c, o)}
        for job in sorted(jobs):
            seen: set[str] = set()
            for pod in world.trainer_pods(job):
                if pod.context not in seen and pod.owner.split("/")[0] != "Deployment":
                    seen.add(pod.context)
                    yield example, pod


RUNS = [(alert, example, pod) for alert in RUN_ALERTS for example, pod in run_scenarios()]
PICKS = {"NODE": "gke-meridian-node-0", "WL": "workload-0", "WL_NS": names.team_namespace("research")}


def run_walk(alert: str, pod: world.Pod, trees: Trees) -> Walk:
    labels = world.alert_labels(ALERTS[alert], pod, run=world.run_name(pod))
    return walk_page(alert, labels, pod, trees, PICKS)


def cluster_walks(alert: str, trees: Trees) -> Iterator[Walk]:
    for region in world.registry().regions:
        tree, _ = trees[region.name]
        queue = next(o["metadata"]["name"] for _, o in tree.objects() if o.get("kind") == "ClusterQueue")
        labels = {"cluster": region.cluster, "pool": region.pools[0].name, "cluster_queue": queue}
        kept = queries.alert_labels(ALERTS[alert].expr) or frozenset()
        yield walk_page(alert, {k: v for k, v in labels.items() if k in kept}, None, trees, PICKS)


def every_walk(trees: Trees) -> Iterator[Walk]:
    for alert, _, pod in RUNS:
        yield run_walk(alert, pod, trees)
    for alert in CLUSTER_ALERTS:
        yield from cluster_walks(alert, trees)


def test_every_alert_has_a_page_and_every_page_runs_commands() -> None:
    assert sorted(PAGES) == sorted(ALERTS)
    assert RUN_ALERTS == ["CheckpointDurableSlow", "CheckpointDurableStalled", "RunGoodputLow", "RunStoppedCommitting"]
    assert all(rc.blocks(text) for text in PAGES.values())


@pytest.mark.parametrize("page", sorted(PAGES))
def test_a_page_reads_only_labels_its_alert_keeps(page: str) -> None:
    """The first line's variables: each from a label the alert's expression keeps; the cluster always."""
    first = rc.literal_assignments(rc.blocks(PAGES[page])[0].lines[0]) or {}
    kept = queries.alert_labels(ALERTS[page].expr) or frozenset()
    assert "CLUSTER" in first
    assert {v: ALERT_VARIABLES.get(v) for v in first if ALERT_VARIABLES.get(v) not in kept} == {}


def _pod_steps(walk: Walk, trees: Trees) -> list[tuple[Step, list[world.Pod]]]:
    """Each step that selects pods by label, with the pods it selects in its cluster and namespace."""
    found = []
    for step in walk.steps:
        command = step.command
        if command.tool == "kubectl" and command.selector is not None and rc.target(command)[0] == "pods":
            pods = [p for p in cluster_pods(trees, step.context) if p.namespace == command.namespace]
            found.append((step, [p for p in pods if rc.matches(command.selector, p.labels)]))
    return found


def _names(pods: list[world.Pod]) -> set[str]:
    return {p.obj["metadata"]["name"] for p in pods}


@pytest.mark.parametrize(
    ("alert", "example", "pod"), RUNS, ids=[f"{a}-{e}-{p.context.split('_')[2]}" for a, e, p in RUNS]
)
def test_selectors_select_the_alerts_pods(alert: str, example: str, pod: world.Pod, trees: Trees) -> None:
    walk = run_walk(alert, pod, trees)
    job = world.job_of(pod)
    alerted = _names([p for p in world.trainer_pods(job) if p.context == pod.context])
    selections = _pod_steps(walk, trees)
    # A selector that selects nothing here, or another job's pods.
    wrong = {s.raw.selector: sorted({world.job_of(p) for p in pods}) for s, pods in selections}
    assert walk.problems == []
    assert {k: v for k, v in wrong.items() if v != [job]} == {}
    assert [s.raw.selector for s, pods in selections if not s.when and alerted <= _names(pods)], (
        f"{alert}: no selector lists the pods of job {job} ({example})"
    )


def test_cluster_pages_select_wardens_pods_and_the_alerts_pool(trees: Trees) -> None:
    pools = [p.name for r in world.registry().regions for p in (*r.pools, *r.cpu_pools)]
    nodes = {p: {names.NODE_POOL_LABEL: p, names.WARDEN_PHASE_LABEL: "held"} for p in pools}
    for alert in CLUSTER_ALERTS:
        for walk in cluster_walks(alert, trees):
            assert walk.problems == [], alert
            for step, pods in _pod_steps(walk, trees):
                assert pods, (alert, step.raw.selector)
                assert {p.owner for p in pods} == {"Deployment/warden"}, (alert, step.raw.selector)
            for step in walk.steps:
                if step.command.selector is not None and rc.target(step.command)[0] == "nodes":
                    chosen = {p for p, labels in nodes.items() if rc.matches(step.command.selector, labels)}
                    assert chosen == {walk.labels["pool"]}, (alert, step.raw.selector)


def _context_problems(walk: Walk, trees: Trees) -> list[str]:
    """Commands without a --context picked from the alert's cluster, or naming a Deployment their cluster lacks."""
    expected = alert_context(walk.labels)
    found = []
    for step in walk.steps:
        raw = step.raw
        if raw.tool not in ("kubectl", "warden") or raw.verb == "config":
            continue
        var = (raw.context or "").removeprefix("$")
        if var not in walk.picked_contexts:
            found.append(f"{walk.page}: {raw.tool} {raw.verb} {' '.join(raw.args)}: no --context picked for the alert")
        elif var == "CONTEXT" and step.context != expected:
            found.append(f"{walk.page}: $CONTEXT is {step.context}, the alert's cluster is {expected}")
        resource, name = rc.target(step.command) if raw.tool == "kubectl" else ("", "")
        if resource == "deployments" and step.command.namespace and step.command.namespace.startswith("team-"):
            rendered = {(o.get("kind"), o["metadata"]["name"]) for c, o in _all_rendered() if c == step.context}
            if ("Deployment", name) not in rendered:
                found.append(f"{walk.page}: no Deployment {name} in {step.context}")
    return found


def _all_rendered() -> list[tuple[str, world.Obj]]:
    return [item for example in world.JOB_EXAMPLES for item in world.rendered(example)]


def test_every_command_names_the_alerts_cluster(trees: Trees) -> None:
    found = [p for walk in every_walk(trees) for p in [*walk.problems, *_context_problems(walk, trees)]]
    assert sorted(set(found)) == []


def operator(fleet: Fleet) -> User:
    assert fleet.project.operators_group is not None
    return User("oncall@meridian.example.com", ("system:authenticated", fleet.project.operators_group))


def step_requests(step: Step) -> list[Access]:
    if step.command.tool == "kubectl":
        return rc.requests(step.command)
    return rc.warden_requests(step.command) if step.command.tool == "warden" else []


GKR_HEALTH = [  # gkr/health_read.py: the nodes, Warden's Events in `default`, Warden's config
    Access("list", "", "nodes"),
    Access("list", "", "events", health_read.EVENTS_PATH.split("/")[4]),
    Access("get", "", "configmaps", names.WARDEN_NAMESPACE, names.WARDEN_CONFIGMAP),
]


def test_the_operators_may_run_every_command(fleet: Fleet, trees: Trees) -> None:
    user, refused = operator(fleet), set()
    objects = {region: [o for _, o in tree.objects()] for region, (tree, _) in trees.items()}
    for walk in every_walk(trees):
        for step in walk.steps:
            region = region_of(step.context)
            assert region is not None, f"{walk.page}: {step.context} is no cluster's context"
            refused |= {(walk.page, str(a)) for a in step_requests(step) if not allowed(objects[region], user, a)}
    assert sorted(refused) == []


def test_the_pages_application_patches_are_admitted(fleet: Fleet, trees: Trees) -> None:
    """RBAC lets the group patch Warden's Application; the guard lets it change one field: each page's patch passes."""
    user = operator(fleet)
    checked, refused = 0, set()
    for walk in every_walk(trees):
        for step in walk.steps:
            command = step.command
            if command.tool != "kubectl" or command.verb != "patch" or rc.target(command)[0] != "applications":
                continue
            region = region_of(step.context)
            assert region is not None, f"{walk.page}: {step.context} is no cluster's context"
            tree, _ = trees[region]
            live = applications.live(tree, rc.target(command)[1])
            new = applications.written(live, json.loads(command.flags["-p"]))
            request = applications.request("UPDATE", new, user.name, user.groups)
            outcomes = admit(policies(o for _, o in tree.objects()), request, new, live, applications.ARGOCD_NAMESPACE)
            refused |= {(walk.page, o.policy, o.message or o.error) for o in outcomes if o.denied}
            checked += 1
    assert checked >= 2  # WardenSplitLeadership's pause and resume, at least
    assert sorted(refused) == []


def test_the_operators_may_run_gkr_health(fleet: Fleet, trees: Trees) -> None:
    for tree, _ in trees.values():
        objects = [o for _, o in tree.objects()]
        assert [a for a in GKR_HEALTH if not allowed(objects, operator(fleet), a)] == []


def _bound_rules(objects: list[world.Obj], group: str) -> Iterator[tuple[str, dict[str, object]]]:
    """(namespace, rule) of every rule bound to the group: "" for a ClusterRoleBinding."""
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}
    for b in objects:
        if b.get("kind") in ("RoleBinding", "ClusterRoleBinding") and any(
            s.get("kind") == "Group" and s.get("name") == group for s in b.get("subjects") or []
        ):
            namespace = b["metadata"].get("namespace", "")
            ref = b["roleRef"]
            role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
            yield from ((namespace, rule) for rule in role.get("rules") or [])


def _where(namespace: str) -> str:
    """Team namespaces are alike (one role binding each): a right used in one team's is used in every team's."""
    return "team-*" if namespace.startswith(names.team_namespace("")) else namespace


def test_no_right_of_the_operators_goes_unused(fleet: Fleet, trees: Trees) -> None:
    """Least privilege: each verb on each resource bound to the group, where it is bound, is one a command uses."""
    requests = [*GKR_HEALTH, *rc.warden_requests(rc.parse("warden hold n"))]
    requests += [a for walk in every_walk(trees) for s in walk.steps for a in step_requests(s)]
    used = {(a.verb, a.group, a.resource, _where(a.namespace)) for a in requests}
    tree, _ = trees[world.registry().regions[0].name]
    unused = {
        (_where(ns) or "*", f"{g or 'core'}/{r}", v)
        for ns, rule in _bound_rules([o for _, o in tree.objects()], str(fleet.project.operators_group))
        for g in rule["apiGroups"]  # type: ignore[attr-defined]
        for r in rule["resources"]  # type: ignore[attr-defined]
        for v in rule["verbs"]  # type: ignore[attr-defined]
        if not any(u[:3] == (v, g, r) and (not ns or u[3] == _where(ns)) for u in used)
    }
    assert sorted(unused) == [], "\n".join(map(str, sorted(unused)))


def _owners(tree: ClusterTree) -> dict[tuple[str, str, str], world.Obj]:
    """(kind, namespace, name) of every object Argo CD manages -> the Application that manages it."""
    apps = {o["metadata"]["name"]: o for o in tree.argocd if o.get("kind") == "Application"}
    found = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): apps[a]
        for a, o in tree.objects()
        if a != "argocd"
    }
    for o in tree.argocd:  # the root application's own objects (root.yaml is applied by bootstrap, unmanaged)
        if o["metadata"]["name"] not in ("root", "bootstrap"):
            found[(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])] = apps["root"]
    return found


def _ignored(app: world.Obj, kind: str, pointers: list[str] | None) -> bool:
    """The application leaves these fields of that kind alone, in its diff and when it syncs."""
    spec = app["spec"]
    if pointers is None or "RespectIgnoreDifferences=true" not in spec.get("syncPolicy", {}).get("syncOptions", []):
        return False
    ignored = [
        p
        for entry in spec.get("ignoreDifferences") or []
        if entry.get("kind") == kind
        for p in entry.get("jsonPointers", [])
    ]
    return all(any(p == i or p.startswith(f"{i}/") for i in ignored) for p in pointers)


def _pause(step: Step, app: str) -> bool | None:
    """True/False: this step pauses/resumes `app`'s automated sync; None: it does neither."""
    command = step.command
    if command.verb != "patch" or rc.target(command) != ("applications", app) or command.namespace != "argocd":
        return None
    if rc.changed_pointers(command) != [PAUSE_POINTER]:
        return None
    enabled = json.loads(command.flags["-p"])["spec"]["syncPolicy"]["automated"]["enabled"]
    return not enabled


def argo_problems(walk: Walk, trees: Trees) -> list[str]:
    found = []
    for i, step in enumerate(walk.steps):
        command = step.command
        if command.tool != "kubectl" or command.verb not in rc.MUTATING:
            continue
        resource, name = rc.target(command)
        kind = KIND_OF.get(resource, resource)
        region = region_of(step.context)
        assert region is not None, f"{walk.page}: {step.context} is no cluster's context"
        owners = _owners(trees[region][0])
        app = owners.get((kind, command.namespace or "", name))
        if app is None or _ignored(app, kind, rc.changed_pointers(command)):
            continue
        own = app["metadata"]["name"]
        paused = any(_pause(s, own) is True for s in walk.steps[:i])
        resumed = any(_pause(s, own) is False for s in walk.steps[i + 1 :])
        if not (paused and resumed):
            found.append(f"{walk.page}: {command.verb} {kind} {name}: Argo CD application {own} reverts it")
    return found


def test_changes_to_what_argo_cd_manages_pause_its_sync(trees: Trees) -> None:
    assert sorted({p for walk in every_walk(trees) for p in argo_problems(walk, trees)}) == []


@pytest.mark.parametrize("page", sorted(PAGES))
def test_runnable_commands_sit_in_sh_blocks(page: str) -> None:
    """An inline `kubectl -n x ...` in prose escapes every check above: only a word or two may stand inline."""
    spans = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", PAGES[page])
    assert [s for s in spans if s.split()[0] in ("kubectl", "warden", "gkr") and len(s.split()) > 2] == []


def test_the_model_of_kubectls_requests() -> None:
    """Per the Kubernetes docs (authorization, "Determine the request verb"; RBAC, "Referring to resources")."""
    logs = rc.requests(rc.parse("kubectl -n team-a logs p --all-containers"))
    assert logs == [Access("get", "", "pods", "team-a", "p"), Access("get", "", "pods/log", "team-a", "p")]
    forward = rc.requests(rc.parse("kubectl -n team-a port-forward deploy/x-lighthouse 29511:29511"))
    assert forward[0] == Access("get", "apps", "deployments", "team-a", "x-lighthouse")
    assert {a.verb for a in forward if a.resource == "pods/portforward"} == {"get", "create"}
    scale = rc.requests(rc.parse("kubectl -n warden scale deployment warden --replicas=1"))
    assert scale[-1] == Access("patch", "apps", "deployments/scale", "warden", "warden")
    assert rc.requests(rc.parse("kubectl get workloads -A")) == [Access("list", "kueue.x-k8s.io", "workloads")]
    patch = rc.parse('kubectl -n argocd patch application warden --type merge -p \'{"spec":{"a":{"b":false}}}\'')
    assert rc.changed_pointers(patch) == ["/spec/a/b"]


def test_a_run_label_selects_nothing_of_a_run_in_one_region() -> None:
    """The finding: `meridian.dev/run` is set on runs across regions only; gkr's job label on every pod."""
    for example in ("pretrain-spares", "grpo-8b", "cpu-data-job"):
        pods = [p for c, o in world.rendered(example) for p in world.pods_of(c, o)]
        assert pods
        assert not [p for p in pods if rc.matches(f"{names.RUN_LABEL}={world.run_name(p)}", p.labels)]
        assert all(rc.matches(f"{names.JOB_LABEL}={world.job_of(p)}", p.labels) for p in pods)


def test_selectors_and_context_picks_follow_kubectl_and_grep() -> None:
    assert rc.matches("a=1,b!=2,!c", {"a": "1", "b": "3"})
    assert not rc.matches("a=1,b!=2", {"a": "1", "b": "2"})
    assert not rc.matches("a", {})
    pick = rc.context_pick('kubectl config get-contexts -o name | grep -x "gke_.*_$CLUSTER" || echo "none-$CLUSTER"')
    assert pick == ("gke_.*_$CLUSTER", "none-$CLUSTER")
    pattern = rc.substitute(pick[0], {"CLUSTER": "meridian-us-east4"})
    assert [c for c in world.contexts() if re.fullmatch(pattern, c)] == [
        "gke_meridian-train-prod_us-east4_meridian-us-east4"
    ]


def test_which_labels_an_alert_keeps() -> None:
    assert queries.alert_labels("sum by (cluster, le) (rate(x[5m])) > 1") == frozenset({"cluster", "le"})
    assert queries.alert_labels("histogram_quantile(0.9, sum by (cluster, le) (rate(x[5m])))") == frozenset({"cluster"})
    assert queries.alert_labels("sum by (a, b) (x) and on (a) y") == frozenset({"a", "b"})
    assert queries.alert_labels("sum by (a, b) (x) / on (a) sum by (a) (y)") == frozenset({"a"})
    assert queries.alert_labels("sum by (a) (x * on (p) group_left (z) y)") == frozenset({"a"})
    assert queries.alert_labels("x * on (p) group_left (z) y") is None  # every label of x, and z
    assert queries.alert_labels("time() - max by (a) (x) > 3") == frozenset({"a"})
