"""`warden serve` (the service), `warden agent` (the node agent), and a person's commands: `warden hold`,
`release`, `report` (a node) and `held` (the held nodes, with why); warden/person.py says what each writes."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time

from contract import names
from contract import warden as config
from contract.problem import Exit, Invalid
from warden.policy import Policy


def load_policy(path: str) -> Policy:
    """Warden's config as `make generate` writes it (contract.warden); one line and exit 2 when it is not one."""
    try:
        with open(path, "rb") as file:
            raw = file.read(config.MAX_BYTES + 1)  # bounded: a hostile file cannot fill the memory
        if len(raw) > config.MAX_BYTES:
            raise Invalid([f"{path}: larger than 1 MiB, not a config fleet wrote; regenerate it with `make generate`"])
        return config.loads(raw.decode("utf-8"), path)
    except OSError as error:
        raise SystemExit(
            _bad(f"{path}: cannot read the config: {error.strerror}; mount the {names.WARDEN_CONFIGMAP} ConfigMap")
        ) from None
    except UnicodeDecodeError:
        raise SystemExit(_bad(f"{path}: not UTF-8 text; regenerate it with `make generate`")) from None
    except Invalid as error:
        raise SystemExit(_bad(error.lines[0])) from None


def _bad(message: str) -> int:
    print(f"warden: {message}", file=sys.stderr)
    return Exit.USAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=__package__, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the service (one active replica through leader election)")
    serve.add_argument(
        "--config",
        default=config.PATH,
        help=f"the config `make generate` writes (ConfigMap {names.WARDEN_CONFIGMAP}; default {config.PATH})",
    )
    serve.add_argument("--dry-run", action="store_true", help="decide and log, change nothing (overrides the config)")
    serve.add_argument("--kubeconfig", help="default: in-cluster credentials")
    serve.add_argument("--leader-election-namespace", default=names.WARDEN_NAMESPACE)
    serve.add_argument("--round-seconds", type=float, default=30)
    serve.add_argument("--resync-seconds", type=float, default=300)
    serve.add_argument("--qps", type=float, default=20, help="Kubernetes API requests per second")
    serve.add_argument("--burst", type=int, default=40)
    serve.add_argument(
        "--reports-qps", type=float, default=5, help="API requests per second for tenants' reports (their own budget)"
    )
    serve.add_argument("--metrics-port", type=int, default=9090)
    serve.add_argument("--health-port", type=int, default=8080)
    serve.add_argument("--once", action="store_true", help="one round, then exit")
    agent = sub.add_parser("agent", help="report kernel-log Xid/SXid events as Node conditions")
    agent.add_argument("--node", default=os.environ.get(names.NODE_NAME_ENV), help=f"default: ${names.NODE_NAME_ENV}")
    agent.add_argument("--kmsg", default="/dev/kmsg")
    agent.add_argument("--interval-seconds", type=float, default=30)
    agent.add_argument("--kubeconfig")
    agent.add_argument("--once", action="store_true")
    _person_parsers(sub)
    return parser


def _person_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verbs = {
        "hold": "take a node out of service for a person: Warden leaves it alone until it is released",
        "release": "return a held node to Warden: its deep check first, then service (--skip-check: at once)",
        "report": "report a node as faulty: Warden takes the fault table's action for a failed preflight",
    }
    for verb, text in verbs.items():
        command = sub.add_parser(verb, help=text)
        command.add_argument("node")
        command.add_argument("--reason", required=True, help="why, for the Node's audit trail and Warden's record")
        if verb == "release":
            command.add_argument("--skip-check", action="store_true", help="no deep check: the node was verified")
        command.add_argument("--dry-run", action="store_true", help="print the patch, write nothing")
    held = sub.add_parser("held", help="the held nodes: since when, why, the last person's command")
    for command in (*(sub.choices[v] for v in verbs), held):
        command.add_argument("--kubeconfig")
        command.add_argument("--context")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    from warden.kube import Kube, client
    from warden.ratelimit import TokenBucket

    if args.command in ("hold", "release", "report", "held"):
        return _person(args)
    if args.command == "agent":
        from warden.agent import Agent

        if not args.node:
            return _bad("--node: missing; set NODE_NAME from the downward API (spec.nodeName)")
        agent = Agent(Kube(client(args.kubeconfig), TokenBucket(1, 5)), args.node, args.kmsg)
        if args.once:
            agent.load()
            agent.step(time.time())
            return 0
        agent.run(stop, args.interval_seconds)
        return 0
    return _serve(args, stop)


def _person(args: argparse.Namespace) -> int:
    import json

    from warden import person
    from warden.errors import ApiError
    from warden.kube import Kube, client

    try:
        kube = Kube(client(args.kubeconfig, args.context))
    except Exception as error:  # the client's config errors have no common base
        return _bad(f"no cluster: {str(error)[:200]}; run `gcloud container clusters get-credentials` first")
    try:
        if args.command == "held":
            print(person.table(person.held_rows(kube.list_nodes()[0], person.now())))
            return 0
        if len(args.reason.strip()) < 3:
            return _bad("--reason: say why, for the audit trail (e.g. --reason 'NCCL timeouts in run r, INC-123')")
        node = kube.get(f"/api/v1/nodes/{args.node}")
        if node is None:
            return _bad(f"{args.node}: no such Node; `kubectl get nodes` lists them")
        who = person.whoami(kube)
        verb = {"hold": person.hold, "report": person.report}.get(args.command)
        now = person.now()
        patch = (
            verb(node, who, args.reason, now) if verb else person.release(node, who, args.reason, now, args.skip_check)
        )
        if args.dry_run:
            print(json.dumps(patch, indent=2, sort_keys=True))
            return 0
        kube.patch_node(args.node, patch)
    except person.Refused as error:
        return _bad(f"{args.node}: {error}")
    except ApiError as error:
        hint = "the Node changed meanwhile: run it again" if error.status == 409 else "are you in the operators group?"
        return _bad(f"{args.node if args.command != 'held' else 'nodes'}: {str(error)[:300]}; {hint}")
    print(f"{args.command}: {args.node} by {who}: {args.reason}")
    return 0


def _serve(args: argparse.Namespace, stop: threading.Event) -> int:
    from dataclasses import replace

    from warden.actions import Actuator
    from warden.gce import Compute
    from warden.httpserve import serve_http
    from warden.kube import Kube, client
    from warden.leader import Elector
    from warden.metrics import WardenMetrics
    from warden.nodecache import NodeCache
    from warden.ratelimit import TokenBucket
    from warden.reports import TenantReports
    from warden.service import Warden, serve
    from warden.sweeper import Sweeper

    if args.qps <= 0 or args.burst < 1 or args.reports_qps <= 0:
        return _bad("--qps and --reports-qps must be > 0 and --burst >= 1")
    policy = load_policy(args.config)
    if args.dry_run:
        policy = replace(policy, dry_run=True)
    identity = os.environ.get("POD_NAME") or socket.gethostname()
    # The Lease has its own client and rate limiter, so a busy round never delays a renewal;
    # every write of the service itself is fenced by the Lease (Elector.check).
    elector = Elector(Kube(client(args.kubeconfig), TokenBucket(5, 10)), args.leader_election_namespace, identity)
    kube = Kube(client(args.kubeconfig), TokenBucket(args.qps, args.burst), guard=elector.check)
    metrics = WardenMetrics()
    cache = NodeCache(kube, resync_s=args.resync_seconds)
    compute = Compute(guard=elector.check)
    sweeper = Sweeper(kube, policy, metrics, cache.store)  # also answers tenants' requests: always there
    actuator = Actuator(kube, compute, policy, cache, metrics)
    # Tenants decide how long their reports take to read (warden.reports): apart from the rounds, own limiter.
    reports = TenantReports(Kube(client(args.kubeconfig), TokenBucket(args.reports_qps, 10)), policy, metrics)
    warden = Warden(kube, policy, cache, actuator, metrics, sweeper=sweeper, reports=None if args.once else reports)
    if not args.once:
        serve_http(args.metrics_port, {"/metrics": lambda: (200, metrics.render())})
        serve_http(args.health_port, {"/healthz": lambda: (200, "ok\n"), "/readyz": lambda: (200, "ok\n")})
    logging.getLogger(__package__).info("warden %s: dry_run=%s", identity, policy.dry_run)
    serve(warden, elector, stop, round_s=args.round_seconds, once=args.once)
    return 0


if __name__ == "__main__":
    sys.exit(main())
