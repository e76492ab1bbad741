"""What the read commands show, from the registry and the cluster's answers (gkr.views: pure)."""

from __future__ import annotations

from gkr import views
from tests.gkr.conftest import shipped


def queue(name: str, nominal: int, used: int) -> dict[str, object]:
    gpu = "nvidia.com/gpu"
    return {
        "metadata": {"name": name},
        "spec": {"resourceGroups": [{"flavors": [{"resources": [{"name": gpu, "nominalQuota": nominal}]}]}]},
        "status": {"flavorsUsage": [{"resources": [{"name": gpu, "total": used}, {"name": "cpu", "total": 7}]}]},
    }


def test_capacity_rows_sum_gpus_by_type_and_show_nominal_quota() -> None:
    reg = shipped().registry
    central = reg.regions[0]
    row = views.capacity_row(central, views.nominal_quota(reg, central))
    assert row["gpus"] == {"nvidia-h200-141gb": sum(p.gpus for p in central.pools)}
    assert row["quota"] == {t.name: t.quota[central.name] for t in reg.teams}
    assert views.capacity_cells(row)[:3] == [
        "us-central1",
        "meridian-us-central1",
        f"{row['gpus']['nvidia-h200-141gb']:,} nvidia-h200-141gb",
    ]
    assert views.capacity_header(reg, live=True)[3:] == [f"free / quota {t.name}" for t in reg.teams]


def test_live_quota_per_team_queue() -> None:
    live = views.live_quota(["research", "evals"], [queue("research", 768, 800)], "")
    assert live == {"research": views.LiveQuota(768, 800), "evals": views.LiveQuota(0, 0)}
    assert views.LiveQuota(768, 800).free == -32  # borrowing
    assert views.live_quota(["research"], None, "timeout") == {"research": "unreachable: timeout"}
    row = views.capacity_row(shipped().registry.regions[0], live)
    assert row["quota"]["research"] == {"nominal": 768, "used": 800, "free": -32}
    assert views.capacity_cells(row)[3] == "-32 / 768"


def test_job_rows_name_the_state_and_queue() -> None:
    labels = {"kueue.x-k8s.io/queue-name": "research"}
    assert views.job_row(
        "rayjob", {"metadata": {"name": "a", "labels": labels}, "status": {"jobDeploymentStatus": "Running"}}
    ) == ["rayjob", "a", "Running", "research", ""]
    assert views.job_row("raycluster", {"metadata": {"name": "b"}, "status": {"state": "ready"}})[2] == "ready"
    job = {
        "metadata": {"name": "c"},
        "status": {"conditions": [{"type": "Suspended", "status": "False"}, {"type": "Complete", "status": "True"}]},
    }
    assert views.job_row("job", job)[2:] == ["Complete", "", ""]
    assert views.job_row("job", {"metadata": {"name": "d"}})[2] == "Pending"
    assert views.prefixed("p", "one\ntwo\n") == "[p] one\n[p] two\n"


def test_a_regions_part_of_a_run_is_listed_with_the_run_and_its_regions() -> None:
    from contract.names import RUN_LABEL
    from gkr.lighthouse import HOME_ANNOTATION, REGIONS_ANNOTATION

    part = {
        "metadata": {
            "name": "llm-us-east4",
            "labels": {RUN_LABEL: "llm"},
            "annotations": {REGIONS_ANNOTATION: "us-central1,us-east4", HOME_ANNOTATION: "us-central1"},
        }
    }
    assert views.job_row("rayjob", part)[4] == "llm: us-central1*, us-east4"
    forged = {"metadata": {"name": "x", "labels": {RUN_LABEL: "llm"}, "annotations": {HOME_ANNOTATION: "elsewhere"}}}
    assert views.job_row("rayjob", forged)[4] == ""  # a hand-edited label alone does not make a run
