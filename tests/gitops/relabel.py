"""What one series looks like after GMP scrapes it: a small interpreter of the relabelling a PodMonitoring asks for.

No promtool or Prometheus binary is installed here, and promtool has no command that applies a relabel config,
so this follows the sources, for the actions Meridian's scrape objects use:

- target labels (prometheus-engine v0.17.2 pkg/operator/apis/monitoring/v1/pod_config.go): project_id, location
  and cluster forced first; `targetLabels.metadata` copied from the pod's metadata (`namespace` from
  __meta_kubernetes_namespace, and always for a PodMonitoring); `job` the object's name; `instance` pod:port;
  `targetLabels.fromPod` copied from __meta_kubernetes_pod_label_<sanitized name>; an empty value is no label.
- the scrape (Prometheus scrape/scrape.go mutateSampleLabels, honor_labels false as GMP renders it): a label the
  exporter wrote that the target also has is renamed exported_<name>; the target's wins.
- metricRelabeling (Prometheus model/relabel/relabel.go): replace, keep, drop, labeldrop, labelkeep; the regex is
  fully anchored; source values joined by `separator` (default ";"); replace writes the expanded replacement
  (default "$1") to target_label only when the regex matches, and an empty result deletes the label.
"""

from __future__ import annotations

import re
from typing import Any

PROTECTED = ("project_id", "location", "cluster", "namespace", "job", "instance")


def _regex(rule: dict[str, Any]) -> re.Pattern[str]:
    return re.compile(f"^(?:{rule.get('regex', '(.*)')})$")


def _expand(template: str, match: re.Match[str]) -> str:
    # Go's Regexp.Expand: $1 and ${1}; a missing group expands to "".
    return re.sub(r"\$\{?(\w+)\}?", lambda m: match.group(int(m.group(1))) or "", template)


def apply(rules: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, str] | None:
    """`labels` after `rules`; None when a rule drops the series."""
    out = dict(labels)
    for rule in rules:
        action = str(rule.get("action", "replace")).lower()
        regex = _regex(rule)
        value = rule.get("separator", ";").join(out.get(s, "") for s in rule.get("sourceLabels", []))
        if action == "keep" and not regex.match(value):
            return None
        if action == "drop" and regex.match(value):
            return None
        if action == "labeldrop":
            out = {k: v for k, v in out.items() if not regex.match(k)}
        elif action == "labelkeep":
            out = {k: v for k, v in out.items() if regex.match(k)}
        elif action == "replace" and (match := regex.match(value)):
            target = _expand(rule["targetLabel"], match)
            result = _expand(rule.get("replacement", "$1"), match)
            if result:
                out[target] = result
            else:
                out.pop(target, None)
        elif action not in ("keep", "drop", "replace"):
            raise NotImplementedError(f"relabel action {action!r} is not modelled here")
    return out


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def target_labels(monitoring: dict[str, Any], pod: dict[str, Any], cluster: str = "c") -> dict[str, str]:
    """The labels GMP gives the target of `pod` under `monitoring` (a PodMonitoring or ClusterPodMonitoring)."""
    spec, meta = monitoring["spec"], pod["metadata"]
    port = spec["endpoints"][0]["port"]
    metadata = spec.get("targetLabels", {}).get("metadata")
    if metadata is None:  # the backward-compatible default (pod_config.go)
        metadata = ["namespace"]
    if monitoring["kind"] == "PodMonitoring":
        metadata = [*metadata, "namespace"]
    sources = {"namespace": meta["namespace"], "pod": meta["name"], "node": pod.get("spec", {}).get("nodeName", "")}
    labels = {"project_id": "p", "location": "l", "cluster": cluster}
    labels |= {k: sources[k] for k in metadata if sources.get(k)}
    labels |= {"job": monitoring["metadata"]["name"], "instance": f"{meta['name']}:{port}"}
    pod_labels = {_sanitize(k): v for k, v in (meta.get("labels") or {}).items()}
    for mapping in spec.get("targetLabels", {}).get("fromPod", []):
        value = pod_labels.get(_sanitize(mapping["from"]), "")
        to = mapping.get("to") or mapping["from"]
        if value:
            labels[to] = value
        else:
            labels.pop(to, None)
    return labels


def scrape(
    monitoring: dict[str, Any], pod: dict[str, Any], series: dict[str, str], cluster: str = "c"
) -> dict[str, str] | None:
    """One exposed series of `pod` (its labels, `__name__` included) as GMP stores it, or None if dropped."""
    target = target_labels(monitoring, pod, cluster)
    merged = dict(series)
    for name in target:
        if name in merged:
            exported = f"exported_{name}"
            while exported in merged or exported in target:
                exported = f"exported_{exported}"
            merged[exported] = merged.pop(name)
    merged |= target
    return apply(monitoring["spec"]["endpoints"][0].get("metricRelabeling", []), merged)
