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
