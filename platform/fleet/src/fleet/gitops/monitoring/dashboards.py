"""Grafana dashboards as code (grafana-foundation-sdk): fleet, run, Warden and Kueue.

They query GMP's fleet-wide view (every cluster's series carry `cluster`), so one set serves every region:
`make generate` writes them to generated/dashboards/<uid>.json for a Grafana whose Prometheus data source is
GMP's query frontend (README "Dashboards"). Every expression is cross-checked like the alerts' (queries.py).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from grafana_foundation_sdk.builders import common, dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import StackingMode
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from contract import names
from contract.metrics import RL, TRAINER, WARDEN
from fleet.gitops.monitoring.rules import CHECKPOINT, GOODPUT, KUEUE, LAST_COMMIT, LEADER
from fleet.model import Fleet

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
GPU = f'resource="{names.GPU_RESOURCE}"'
# Warden's phases as the fleet dashboard groups them (warden.state.PHASES; a test keeps them in step).
STATES = {
    "quarantined": ("suspect", "quarantined", "draining"),
    "repairing": ("remediating", "probation"),
    "held": ("held",),
}
HEALTHY = "healthy"
PRODUCTIVE = ',category="productive"'
RATE = "5m"


# A run is (namespace, run): two teams may name runs alike (rules.py).
RUN = "namespace, run"
RUN_LEGEND = "{{namespace}} {{run}}"


def _run(m: str, extra: str = "") -> str:
    return f'{m}{{namespace=~"$namespace",run=~"$run"{extra}}}'


class Board:
    """A dashboard under construction, and every query it holds (for the cross-check)."""

    def __init__(self, uid: str, title: str, description: str) -> None:
        self.queries: list[str] = []
        self.builder = (
            dashboard.Dashboard(title)
            .uid(uid)
            .description(description)
            .tags(["meridian"])
            .time("now-6h", "now")
            .refresh("1m")
            .readonly()
            .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        )

    def variable(self, name: str, selector: str, label: str) -> Board:
        """A multi-valued variable over the values of `label` on `selector` (Grafana's label_values)."""
        self.queries.append(selector)
        variable = (
            dashboard.QueryVariable(name)
            .label(name)
            .datasource(DATASOURCE)
            .query(f"label_values({selector}, {label})")
            .multi(True)
            .include_all(True)
        )
        self.builder.with_variable(variable)
        return self

    def row(self, title: str) -> Board:
        self.builder.with_row(dashboard.Row(title))
        return self

    def graph(
        self,
        title: str,
        targets: Iterable[tuple[str, str]],
        unit: str = "short",
        stacked: bool = False,
        width: int = 12,
    ) -> Board:
        panel = timeseries.Panel().title(title).datasource(DATASOURCE).unit(unit).span(width).height(8)
        if stacked:
            panel.stacking(common.StackingConfig().mode(StackingMode.NORMAL))
        self._targets(panel, targets)
        return self

    def number(self, title: str, targets: Iterable[tuple[str, str]], unit: str = "short", width: int = 6) -> Board:
        panel = stat.Panel().title(title).datasource(DATASOURCE).unit(unit).span(width).height(4)
        self._targets(panel, targets)
        return self

    def _targets(self, panel: timeseries.Panel | stat.Panel, targets: Iterable[tuple[str, str]]) -> None:
        for index, (expr, legend) in enumerate(targets):
            self.queries.append(expr)
            panel.with_target(
                prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + index)).range()
            )
        self.builder.with_panel(panel)

    def json(self) -> str:
        return json.dumps(self.builder.build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def _gpus(fleet: Fleet, phases: Iterable[str]) -> str:
    """GPUs on Warden's nodes in `phases`, by cluster: nodes times each pool's GPUs per node (from the catalog)."""
    by_gpus: dict[int, set[str]] = defaultdict(set)
    for region in fleet.regions:
        for pool in region.gpu_pools:
            by_gpus[pool.machine.gpus].add(pool.name)
    phase = "|".join(phases)
    terms = [
        f'{WARDEN.nodes.name}{{phase=~"{phase}",pool=~"{"|".join(sorted(pools))}"}} * {gpus}'
        for gpus, pools in sorted(by_gpus.items())
    ]
    return f"sum by (cluster) (({' or '.join(terms)}) * {LEADER})"


def fleet_board(fleet: Fleet) -> Board:
    running = f"sum by (cluster) (kueue_cluster_queue_resource_usage{{{GPU},{KUEUE}}})"
    board = Board("meridian-fleet", "Meridian fleet", "GPUs per region and team by state; Kueue usage against quota.")
    board.row("GPUs by state, per region")
    board.graph(
        "GPUs by state",
        [
            (running, "{{cluster}} running jobs"),
            (f"{_gpus(fleet, [HEALTHY])} - {running}", "{{cluster}} idle"),
            *((_gpus(fleet, phases), f"{{{{cluster}}}} {state}") for state, phases in STATES.items()),
        ],
        stacked=True,
        width=24,
    )
    board.row("Teams")
    board.graph(
        "GPUs in use per team",
        [
            (
                f"sum by (cluster, cluster_queue) (kueue_cluster_queue_resource_usage{{{GPU},{KUEUE}}})",
                "{{cluster}} {{cluster_queue}}",
            )
        ],
        stacked=True,
    )
    board.graph(
        "GPU usage / nominal quota per team",
        [
            (
                f"sum by (cluster, cluster_queue) (kueue_cluster_queue_resource_usage{{{GPU},{KUEUE}}})"
                f" / sum by (cluster, cluster_queue) (kueue_cluster_queue_nominal_quota{{{GPU},{KUEUE}}})",
                "{{cluster}} {{cluster_queue}}",
            )
        ],
        unit="percentunit",
    )
    board.graph("GPU utilization (DCGM)", [("avg by (cluster) (DCGM_FI_DEV_GPU_UTIL)", "{{cluster}}")], unit="percent")
    board.graph(
        "Tensor pipes active (DCGM)",
        [("avg by (cluster) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)", "{{cluster}}")],
        unit="percentunit",
    )
    return board


def run_board() -> Board:
    step = TRAINER.step.name
    board = Board("meridian-run", "Meridian run", "One run's progress, efficiency, goodput and checkpoints.")
    board.variable("namespace", step, "namespace")
    board.variable("run", f'{step}{{namespace=~"$namespace"}}', "run")
    board.row("Progress")
    board.number("Step", [(f"max by ({RUN}) ({_run(step)})", RUN_LEGEND)])
    board.number("Since last commit", [(f"time() - max by ({RUN}) ({_run(LAST_COMMIT)})", RUN_LEGEND)], unit="s")
    board.number("Participants", [(f"min by ({RUN}) ({_run(TRAINER.participants.name)})", RUN_LEGEND)])
    board.number(
        "Heals (1 h)",
        [(f"sum by ({RUN}) (increase({_run(TRAINER.heals.name)}[1h]))", RUN_LEGEND)],
    )
    board.graph("Loss", [(f"avg by ({RUN}) ({_run(TRAINER.loss.name)})", RUN_LEGEND)])
    board.graph(
        "Tokens per second",
        [
            (
                f"sum by ({RUN}, region) ({_run(TRAINER.tokens_per_second.name)})",
                f"{RUN_LEGEND} {{{{region}}}}",
            )
        ],
    )
    board.graph("MFU", [(f"avg by ({RUN}) ({_run(TRAINER.mfu_ratio.name)})", RUN_LEGEND)], unit="percentunit")
    board.row("Goodput")
    board.graph(
        "Group-seconds by category",
        [(f"sum by (category) (rate({_run(GOODPUT)}[{RATE}]))", "{{category}}")],
        stacked=True,
    )
    board.number(
        "Goodput (productive share, 6 h)",
        [
            (
                f"sum by ({RUN}) (increase({_run(GOODPUT, PRODUCTIVE)}[6h]))"
                f" / sum by ({RUN}) (increase({_run(GOODPUT)}[6h]))",
                RUN_LEGEND,
            )
        ],
        unit="percentunit",
    )
    board.row("Checkpoints")
    board.graph(
        "Time to staged / durable (p95)",
        [
            (
                f"histogram_quantile(0.95, sum by (state, le) (rate({_run(CHECKPOINT + '_bucket')}[1h])))",
                "{{state}}",
            )
        ],
        unit="s",
    )
    board.graph(
        "Checkpoints per hour",
        [(f"sum by (state) (increase({_run(CHECKPOINT + '_count')}[1h]))", "{{state}}")],
    )
    return rl_row(board)


def _rate(metric: str, window: str = RATE) -> str:
    return f"sum by ({RUN}) (rate({_run(metric)}[{window}]))"


def rl_row(board: Board) -> Board:
    """RL post-training (contract.metrics.RL): empty for a run that is not one."""
    age = RL.sample_age.name
    board.row("RL")
    board.graph("Mean sampled reward", [(f"avg by ({RUN}) ({_run(RL.reward_mean.name)})", RUN_LEGEND)])
    board.graph(
        "Held-out greedy accuracy",
        [(f"avg by ({RUN}) ({_run(RL.greedy_accuracy.name)})", RUN_LEGEND)],
        unit="percentunit",
    )
    board.number("Policy version", [(f"max by ({RUN}) ({_run(RL.policy_version.name)})", RUN_LEGEND)])
    board.number(
        "Stale groups trained (bound: 0)",
        [(f"sum by ({RUN}) ({_run(RL.stale_trained.name)})", RUN_LEGEND)],
    )
    board.number(
        "Prompts re-issued (1 h)",
        [(f"sum by ({RUN}) (increase({_run(RL.reissued.name)}[1h]))", RUN_LEGEND)],
    )
    board.number(
        "Weight sync (p95, 1 h)",
        [
            (
                f"histogram_quantile(0.95, sum by ({RUN}, le) (rate({_run(RL.weight_sync_seconds.name + '_bucket')}[1h])))",
                RUN_LEGEND,
            )
        ],
        unit="s",
    )
    board.graph(
        "Sample age (versions)",
        [
            (f"{_rate(age + '_sum')} / {_rate(age + '_count')}", f"{RUN_LEGEND} mean"),
            (f"histogram_quantile(1, sum by ({RUN}, le) (rate({_run(age + '_bucket')}[{RATE}])))", f"{RUN_LEGEND} max"),
        ],
    )
    board.graph(
        "Tokens per second",
        [
            (_rate(RL.generated_tokens.name), f"{RUN_LEGEND} generated"),
            (_rate(RL.trained_tokens.name), f"{RUN_LEGEND} trained"),
        ],
    )
    policy_panels(board)
    board.graph(
        "Generator-seconds by state",
        [(f"sum by (state) (rate({_run(RL.generator_seconds.name)}[{RATE}]))", "{{state}}")],
        stacked=True,
        width=24,
    )
    board.graph(  # a generator that keeps answering what no engine writes stands out by its name
        "Generator answers refused (1 h), by generator and reason",
        [(f"sum by (generator, reason) (increase({_run(RL.refused_answers.name)}[1h]))", "{{generator}} {{reason}}")],
        width=24,
    )
    return board


def policy_panels(board: Board) -> None:
    """What each RL step did to its whole batch: clipping, importance ratio, entropy, KL, lengths, truncation."""
    board.graph(  # the clip binding on many tokens: samples too stale or a learning rate too high
        "Clipped tokens and truncated completions",
        [
            (f"avg by ({RUN}) ({_run(RL.clip_fraction.name)})", f"{RUN_LEGEND} clipped"),
            (f"avg by ({RUN}) ({_run(RL.truncated.name)})", f"{RUN_LEGEND} truncated"),
        ],
        unit="percentunit",
    )
    board.graph(
        "Importance ratio (trainer / sampler)",
        [
            (f"avg by ({RUN}) ({_run(RL.importance_ratio_mean.name)})", f"{RUN_LEGEND} mean"),
            (f"max by ({RUN}) ({_run(RL.importance_ratio_max.name)})", f"{RUN_LEGEND} max"),
        ],
    )
    board.graph(  # entropy collapsing towards 0: the policy stopped exploring
        "Entropy and KL (nats per token)",
        [
            (f"avg by ({RUN}) ({_run(RL.entropy.name)})", f"{RUN_LEGEND} entropy"),
            (f"avg by ({RUN}) ({_run(RL.kl_sampler.name)})", f"{RUN_LEGEND} KL sampler"),
            (f"avg by ({RUN}) ({_run(RL.kl_reference.name)})", f"{RUN_LEGEND} KL reference"),
        ],
    )
    board.graph(
        "Response length (tokens)",
        [
            (f"avg by ({RUN}) ({_run(RL.response_tokens_mean.name)})", f"{RUN_LEGEND} mean"),
            (f"max by ({RUN}) ({_run(RL.response_tokens_max.name)})", f"{RUN_LEGEND} max"),
        ],
    )


def warden_board() -> Board:
    board = Board("meridian-warden", "Meridian Warden", "Nodes by phase, Warden's actions and its circuit breaker.")
    board.graph(
        "Nodes by phase",
        [(f"sum by (cluster, phase) ({WARDEN.nodes.name} * {LEADER})", "{{cluster}} {{phase}}")],
        stacked=True,
        width=24,
    )
    board.graph(
        "Out-of-service nodes by pool",
        [
            (
                f'sum by (cluster, pool) ({WARDEN.nodes.name}{{phase!="{HEALTHY}"}} * {LEADER})',
                "{{cluster}} {{pool}}",
            )
        ],
    )
    board.graph(
        "Breaker: suspects kept in service",
        [(f"sum by (cluster) ({WARDEN.blocked.name} * {LEADER})", "{{cluster}}")],
    )
    board.graph(
        "Actions per hour",
        [
            (
                f"sum by (verb, carried_out) (increase({WARDEN.commands.name}[1h]))",
                "{{verb}} carried out={{carried_out}}",
            )
        ],
    )
    board.graph(
        "Transitions per hour",
        [(f"sum by (to_phase) (increase({WARDEN.transitions.name}[1h]))", "to {{to_phase}}")],
    )
    board.graph(
        "GPU Xids per hour by pool",
        [(f"sum by (cluster, pool, xid) (increase({WARDEN.xids.name}[1h]))", "{{pool}} Xid {{xid}}")],
    )
    board.graph(
        "Errors per hour",
        [
            (f"sum by (cluster) (increase({WARDEN.api_errors.name}[1h]))", "{{cluster}} API"),
            (f"sum by (cluster, stage) (increase({WARDEN.node_errors.name}[1h]))", "{{cluster}} node {{stage}}"),
        ],
    )
    board.graph(
        "Round time (leader)",
        [(f"max by (cluster) ({WARDEN.round_seconds.name} * {LEADER})", "{{cluster}}")],
        unit="s",
    )
    return board


class Graph(NamedTuple):
    """A time series panel: its title, (query, legend) targets and how it is drawn (Board.graph)."""

    title: str
    targets: list[tuple[str, str]]
    unit: str = "short"
    stacked: bool = False
    width: int = 12


QUEUE = "{{cluster}} {{cluster_queue}}"
# Kueue's own metrics, per ClusterQueue (metrics.enableClusterQueueResources adds the quota gauges).
KUEUE_GRAPHS = (
    Graph(
        "Pending workloads",
        [
            (
                f"sum by (cluster, cluster_queue, status) (kueue_pending_workloads{{{KUEUE}}})",
                f"{QUEUE} {{{{status}}}}",
            )
        ],
        stacked=True,
    ),
    Graph(
        "Admitted workloads (active)",
        [(f"sum by (cluster, cluster_queue) (kueue_admitted_active_workloads{{{KUEUE}}})", QUEUE)],
        stacked=True,
    ),
    Graph(
        "Admissions per hour",
        [(f"sum by (cluster, cluster_queue) (increase(kueue_admitted_workloads_total{{{KUEUE}}}[1h]))", QUEUE)],
    ),
    Graph(
        "Preemptions per hour",
        [
            (
                f"sum by (cluster, preempting_cluster_queue, reason) (increase(kueue_preempted_workloads_total{{{KUEUE}}}[1h]))",
                "{{cluster}} {{preempting_cluster_queue}} {{reason}}",
            )
        ],
    ),
    Graph(
        "Evictions per hour",
        [
            (
                f"sum by (cluster, cluster_queue, reason) (increase(kueue_evicted_workloads_total{{{KUEUE}}}[1h]))",
                f"{QUEUE} {{{{reason}}}}",
            )
        ],
    ),
    Graph(
        "Admission wait (p95)",
        [
            (
                "histogram_quantile(0.95, sum by (cluster, cluster_queue, le)"
                f" (rate(kueue_admission_wait_time_seconds_bucket{{{KUEUE}}}[1h])))",
                QUEUE,
            )
        ],
        unit="s",
    ),
    Graph(
        "GPU usage and nominal quota",
        [
            (f"sum by (cluster, cluster_queue) (kueue_cluster_queue_resource_usage{{{GPU},{KUEUE}}})", f"{QUEUE} used"),
            (f"sum by (cluster, cluster_queue) (kueue_cluster_queue_nominal_quota{{{GPU},{KUEUE}}})", f"{QUEUE} quota"),
        ],
        width=24,
    ),
)


def kueue_board() -> Board:
    board = Board("meridian-kueue", "Meridian Kueue", "Pending, admitted and preempted workloads per ClusterQueue.")
    for graph in KUEUE_GRAPHS:
        board.graph(graph.title, graph.targets, unit=graph.unit, stacked=graph.stacked, width=graph.width)
    return board


def boards(fleet: Fleet) -> list[Board]:
    return [fleet_board(fleet), run_board(), warden_board(), kueue_board()]


def dashboard_files(fleet: Fleet) -> dict[str, str]:
    """{file name: dashboard JSON} for generated/dashboards/."""
    return {f"{b.builder.build().uid}.json": b.json() for b in boards(fleet)}
