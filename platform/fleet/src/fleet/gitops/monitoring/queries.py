"""Every PromQL query the generated rules and dashboards hold: it must parse, and select only known metrics.

Known: what contract.metrics declares (the series a query may use) and the pinned upstream lists
(upstream.py). The parser is promql-parser (the Rust PromQL parser's Python binding), not a regular
expression: a query that Prometheus would refuse fails here too.
"""

from __future__ import annotations

from functools import cache

import promql_parser

from contract import metrics
from fleet.gitops.monitoring import upstream


@cache
def known() -> frozenset[str]:
    return frozenset(s for m in metrics.ALL for s in m.series()) | upstream.names()


def selected(expr: str) -> list[str]:
    """The metric names `expr` selects, in order; ValueError (the parser's message) if it does not parse.

    A selector without a name (`{__name__=~"..."}`) is refused: nothing could check what it selects.
    """
    tree = promql_parser.parse(expr)
    found: list[str] = []
    nameless: list[str] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            name = node.name or next(
                (
                    m.value
                    for m in node.matchers.matchers
                    if m.name == "__name__" and m.op == promql_parser.MatchOp.Equal
                ),
                None,
            )
            if name:
                found.append(name)
            else:
                nameless.append(str(node))
        return True

    promql_parser.walk(tree, visit)
    if nameless:
        raise ValueError(f"selector without a metric name: {nameless[0]}")
    return found


def problems(expr: str) -> list[str]:
    """One line per problem with `expr`: it does not parse, or it selects a name nobody exports."""
    try:
        names = selected(expr)
    except ValueError as exc:
        return [f"{expr}: does not parse: {exc}"]
    return [f"{expr}: unknown metric {n}" for n in dict.fromkeys(names) if n not in known()]


# A run's name is its team's to choose, so two teams may both have a run "llama": a run is (namespace, run), and
# the namespace is the one label the scrape takes from the pod's real namespace (scrape.py).
RUN, NAMESPACE = "run", "namespace"


def run_scoping(expr: str) -> list[str]:
    """One line per place where `expr` keys on `run` without `namespace`: grouping, matching or selecting by it.

    `by (.., run, ..)` and `on (.., run, ..)` must also name `namespace`; `without` and `ignoring` must not drop
    it; a selector with a `run` matcher must also match `namespace`. Parse errors are problems() business.
    """
    found: list[str] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            labels = set(node.modifier.labels)
            by = node.modifier.type == promql_parser.AggModifierType.By
            if (by and RUN in labels and NAMESPACE not in labels) or (not by and NAMESPACE in labels):
                found.append(f"{expr}: {node.modifier} keeps {RUN} without {NAMESPACE}")
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier and node.modifier.matching:
            labels = set(node.modifier.matching.labels)
            on = node.modifier.matching.type == promql_parser.LabelModifierType.Include
            if (on and RUN in labels and NAMESPACE not in labels) or (not on and NAMESPACE in labels):
                found.append(f"{expr}: {node.modifier.matching} matches {RUN} without {NAMESPACE}")
        elif isinstance(node, promql_parser.VectorSelector):
            matched = {m.name for m in node.matchers.matchers}
            if RUN in matched and NAMESPACE not in matched:
                found.append(f"{expr}: {node} selects a {RUN} without its {NAMESPACE}")
        return True

    try:
        promql_parser.walk(promql_parser.parse(expr), visit)
    except ValueError:
        return []
    return found


def alert_labels(expr: str) -> frozenset[str] | None:
    """The labels every series of `expr`'s result carries by construction; None: whatever its input series carry.

    What a page may read from the alert (runbooks: `CLUSTER=`, `NS=` ... from its labels). Prometheus' rules
    (promql/engine.go at v2.42): an aggregation keeps its `by` labels (`without` drops from its input's);
    `and`/`unless` keep the left side's; one-to-one arithmetic or comparison keeps the left side's, only the `on`
    labels with `on (...)` (resultMetric), less the `ignoring` ones; `group_left`/`group_right` keep the many side's
    and add the `group_*` labels; against a scalar, the vector side's; histogram_quantile drops `le`.
    """
    return _labels(promql_parser.parse(expr))


def _labels(node: object) -> frozenset[str] | None:
    if isinstance(node, promql_parser.ParenExpr | promql_parser.UnaryExpr):
        return _labels(node.expr)
    if isinstance(node, promql_parser.NumberLiteral | promql_parser.StringLiteral):
        return frozenset()
    if isinstance(node, promql_parser.Call):
        vectors = [a for a in node.args if not isinstance(a, promql_parser.NumberLiteral | promql_parser.StringLiteral)]
        found = _labels(vectors[0]) if vectors else frozenset()
        return found - {"le"} if found is not None and node.func.name == "histogram_quantile" else found
    if isinstance(node, promql_parser.AggregateExpr):
        inner = _labels(node.expr)
        if node.modifier is None:
            return frozenset()
        listed = frozenset(node.modifier.labels)
        if node.modifier.type == promql_parser.AggModifierType.By:
            return listed
        return None if inner is None else inner - listed
    if isinstance(node, promql_parser.BinaryExpr):
        return _binary_labels(node)
    return None  # a selector: every label of the series it selects


def _binary_labels(node: promql_parser.BinaryExpr) -> frozenset[str] | None:
    left, right = _labels(node.lhs), _labels(node.rhs)
    if _is_scalar(node.lhs):
        return right
    if _is_scalar(node.rhs) or str(node.op) in ("and", "unless"):
        return left
    if str(node.op) == "or":
        return None if left is None or right is None else left & right
    modifier = node.modifier
    matching = modifier.matching if modifier is not None else None
    card = modifier.card if modifier is not None else promql_parser.VectorMatchCardinality.OneToOne
    extra = frozenset(modifier.group_labels or ()) if modifier is not None else frozenset[str]()
    if card == promql_parser.VectorMatchCardinality.ManyToOne:
        return None if left is None else left | extra
    if card == promql_parser.VectorMatchCardinality.OneToMany:
        return None if right is None else right | extra
    if matching is None:
        return left
    listed = frozenset(matching.labels)
    if matching.type == promql_parser.LabelModifierType.Include:
        return listed
    return None if left is None else left - listed


def _is_scalar(node: object) -> bool:
    if isinstance(node, promql_parser.ParenExpr | promql_parser.UnaryExpr):
        return _is_scalar(node.expr)
    if isinstance(node, promql_parser.NumberLiteral):
        return True
    if isinstance(node, promql_parser.Call):
        return bool(node.func.return_type == promql_parser.ValueType.Scalar)
    if isinstance(node, promql_parser.BinaryExpr):
        return _is_scalar(node.lhs) and _is_scalar(node.rhs)
    return False
