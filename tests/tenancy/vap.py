"""A small ValidatingAdmissionPolicy evaluator over the real CEL library, shaped like the API server's.

For one request it finds the policies whose matchConstraints and bindings select it (resource rules,
operations, namespace selector on the namespace's labels), evaluates matchConditions, then the
variables in order and the validations, with the context the API server gives CEL: `object`,
`oldObject`, `request`, `params`, `namespaceObject`, `variables`
(https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/).
Not modelled: `authorizer`, parameter objects, audit annotations, type checking.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cel

Obj = dict[str, Any]
RESEARCHER = "alice@meridian.example.com"


@dataclass(frozen=True)
class Request:
    operation: str  # CREATE, UPDATE (a PATCH arrives as UPDATE)
    group: str
    version: str
    resource: str
    kind: str
    namespace: str = ""
    name: str = ""
    sub_resource: str = ""
    username: str = RESEARCHER
    groups: tuple[str, ...] = ("system:authenticated",)
    extra: Mapping[str, list[str]] = field(default_factory=dict)

    def as_cel(self) -> Obj:
        kind = {"group": self.group, "version": self.version, "kind": self.kind}
        resource = {"group": self.group, "version": self.version, "resource": self.resource}
        user: Obj = {"username": self.username, "groups": list(self.groups)}
        if self.extra:  # omitted when empty, as in AdmissionRequest
            user["extra"] = {k: list(v) for k, v in self.extra.items()}
        request: Obj = {
            "uid": "test",
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": user,
            "dryRun": False,
        }
        if self.sub_resource:
            request["subResource"] = self.sub_resource
            request["requestSubResource"] = self.sub_resource
        return request


@dataclass(frozen=True)
class Outcome:
    policy: str
    denied: bool
    message: str
    error: str = ""  # a CEL error: the policy's failurePolicy (Fail) refuses, but a test wants to know


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; an absent selector selects everything."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _rule_matches(rule: Mapping[str, Any], request: Request) -> bool:
    resource = request.resource + (f"/{request.sub_resource}" if request.sub_resource else "")
    resources = rule.get("resources", [])
    main, _, _ = resource.partition("/")
    return (
        any(g in ("*", request.group) for g in rule.get("apiGroups", []))
        and any(v in ("*", request.version) for v in rule.get("apiVersions", []))
        and any(o in ("*", request.operation) for o in rule.get("operations", []))
        and (resource in resources or ("*" in resources and not request.sub_resource) or f"{main}/*" in resources)
    )


def _resources_match(match: Mapping[str, Any] | None, request: Request, namespace: Obj | None) -> bool:
    if not match:
        return True
    rules = match.get("resourceRules")
    if rules is not None and not any(_rule_matches(r, request) for r in rules):
        return False
    if namespace is not None:  # cluster-scoped objects other than Namespaces are never skipped by it
        labels = namespace.get("metadata", {}).get("labels") or {}
        if not selects(match.get("namespaceSelector"), labels):
            return False
    return True


def expressions(policy: Obj) -> list[str]:
    """Every CEL expression in a policy."""
    spec = policy["spec"]
    found = [c["expression"] for c in spec.get("matchConditions", [])]
    found += [v["expression"] for v in spec.get("variables", [])]
    for v in spec.get("validations", []):
        found.append(v["expression"])
        if "messageExpression" in v:
            found.append(v["messageExpression"])
    return found


def _evaluate(expression: str, context: Any) -> Any:
    return _program(expression).execute(context)


@functools.cache
def _program(expression: str) -> Any:
    """Each expression compiled once (cel.evaluate compiled it again on every call: a third of the tenancy tests' time)."""
    return cel.compile(expression)


def evaluate(
    policy: Obj,
    bindings: Sequence[Obj],
    request: Request,
    obj: Obj | None,
    old: Obj | None = None,
    namespace: Obj | None = None,
) -> Outcome | None:
    """The policy's decision, or None when it does not apply to this request."""
    name = policy["metadata"]["name"]
    spec = policy["spec"]
    if not _resources_match(spec.get("matchConstraints"), request, namespace):
        return None
    if not any(_resources_match(b["spec"].get("matchResources"), request, namespace) for b in bindings):
        return None
    # One cel.Context for the request: it converts the objects to CEL values once, not once per expression.
    context = cel.Context(
        variables={
            "object": obj,
            "oldObject": old,
            "request": request.as_cel(),
            "params": None,
            "namespaceObject": namespace,
            "variables": {},
        }
    )
    variables: Obj = {}
    try:
        for condition in spec.get("matchConditions", []):
            if _evaluate(condition["expression"], context) is not True:
                return None
        for variable in spec.get("variables", []):
            variables = {**variables, variable["name"]: _evaluate(variable["expression"], context)}
            context.add_variable("variables", variables)
        for validation in spec["validations"]:
            if _evaluate(validation["expression"], context) is True:
                continue
            message = validation.get("message", "")
            if "messageExpression" in validation:
                message = str(_evaluate(validation["messageExpression"], context))
            return Outcome(name, True, message)
    except Exception as exc:  # any CEL failure is a refusal under failurePolicy Fail
        return Outcome(name, True, "", error=f"{type(exc).__name__}: {exc}")
    return Outcome(name, False, "")


def admit(
    policies: Mapping[str, tuple[Obj, list[Obj]]],
    request: Request,
    obj: Obj | None,
    old: Obj | None = None,
    namespace: Obj | None = None,
) -> list[Outcome]:
    """Every applicable policy's outcome; the request is admitted when none denies."""
    outcomes = [evaluate(p, b, request, obj, old, namespace) for p, b in policies.values()]
    return [o for o in outcomes if o is not None]
