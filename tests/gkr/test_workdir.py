"""--workdir: pack, ignore rules, size limit, and the upload against a local GCS emulator."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import Result
from gcp_storage_emulator.server import create_server  # type: ignore[import-untyped]

from contract.problem import Invalid
from gkr import workdir
from tests.gkr.test_kube import FakeApiServer, server, use_kubeconfig  # noqa: F401 - the fixture
from tests.ports import free_port

BUCKET = "meridian-ckpt-us-east4"


def project(root: Path) -> Path:
    files = {
        "train.py": "print('hi')\n",
        "lib/model.py": "x = 1\n",
        "lib/__pycache__/model.cpython-312.pyc": "junk",
        "data/big.bin": "0" * 1000,
        "notes/keep.md": "keep\n",
        "notes/scratch.tmp": "tmp\n",
        "notes/.gitignore": "*.tmp\n",
        ".gitignore": "__pycache__/\n/data/\n*.log\n!important.log\n",
        ".gkrignore": "notes/keep.md\n",
        "run.log": "log\n",
        "important.log": "kept by negation\n",
        ".git/HEAD": "ref: refs/heads/main\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "train.py").chmod(0o755)
    return root


def test_ignore_rules(tmp_path: Path) -> None:
    assert workdir.collect(project(tmp_path)) == [
        ".gitignore",
        ".gkrignore",
        "important.log",
        "lib/model.py",
        "notes/.gitignore",
        "train.py",
    ]


def test_the_zip_is_deterministic_and_has_one_top_folder(tmp_path: Path) -> None:
    root = project(tmp_path / "a")
    first, second = workdir.pack(root), workdir.pack(root)
    try:
        assert first.sha256 == second.sha256
        assert first.zip_path.read_bytes() == second.zip_path.read_bytes()
        with zipfile.ZipFile(first.zip_path) as archive:
            names = archive.namelist()
            assert {n.split("/")[0] for n in names} == {"workdir"}
            assert archive.read("workdir/train.py") == b"print('hi')\n"
            assert archive.getinfo("workdir/train.py").external_attr >> 16 & 0o777 == 0o755
        (root / "train.py").write_text("print('changed')\n")
        changed = workdir.pack(root)
        assert changed.sha256 != first.sha256
        changed.zip_path.unlink()
    finally:
        first.zip_path.unlink()
        second.zip_path.unlink()


def test_size_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    root = project(tmp_path)
    with pytest.raises(Invalid) as refused:
        workdir.pack(root, limit=10)
    assert "above the 0 MiB a Ray working_dir may hold" in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """gcp-storage-emulator with the us-east4 checkpoint bucket, as tests/trainer/test_checkpoint.py starts it."""
    port = free_port()
    emulator = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    emulator.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        emulator.stop()


def objects_in(host: str) -> list[str]:
    from urllib.request import urlopen

    with urlopen(f"{host}/storage/v1/b/{BUCKET}/o") as reply:
        return sorted(o["name"] for o in json.load(reply).get("items", []))


def test_upload_is_content_addressed_and_idempotent(gcs: str, tmp_path: Path) -> None:
    package = workdir.pack(project(tmp_path))
    target = workdir.uri(BUCKET, "research", package.sha256)
    try:
        assert workdir.upload(package, target) is True
        assert workdir.upload(package, target) is False  # already there: not sent again
    finally:
        package.zip_path.unlink()
    assert objects_in(gcs) == [f"teams/research/workdirs/{package.sha256}.zip"]


ARGS = ("submit", "--name", "exp-1", "--team", "research", "--region", "us-east4", "--pods", "1")


def test_dry_run_says_what_would_be_uploaded_and_uploads_nothing(
    gkr: Callable[..., Result], gcs: str, tmp_path: Path
) -> None:
    root = project(tmp_path / "code")
    result = gkr(*ARGS, "--workdir", str(root), "--dry-run", "--", "python", "train.py")
    assert result.exit_code == 0, result.stderr
    package = workdir.pack(root)
    package.zip_path.unlink()
    target = f"gs://{BUCKET}/teams/research/workdirs/{package.sha256}.zip"
    line = result.stderr.splitlines()[-1]
    assert line.startswith(f"would upload workdir {root}: 6 files, ")
    assert line.endswith(f" -> {target}")
    (job,) = yaml.safe_load_all(result.stdout)
    assert yaml.safe_load(job["spec"]["runtimeEnvYAML"]) == {"working_dir": target}
    assert objects_in(gcs) == []


def test_submit_uploads_then_applies(
    gkr: Callable[..., Result],
    gcs: str,
    server: str,  # noqa: F811 - test_kube's fake API server
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_kubeconfig(tmp_path, monkeypatch, "gke_meridian-train-prod_us-east4_meridian-us-east4", server)
    root = project(tmp_path / "code")
    first = gkr(*ARGS, "--workdir", str(root), "--", "python", "train.py")
    assert first.exit_code == 0, first.stderr
    assert "\nuploaded workdir " in first.stderr
    again = gkr(*ARGS, "--workdir", str(root), "--", "python", "train.py")
    assert "\nalready uploaded workdir " in again.stderr
    (name,) = objects_in(gcs)
    applied = FakeApiServer.requests[-1]["body"]
    assert applied["spec"]["runtimeEnvYAML"] == f"working_dir: gs://{BUCKET}/{name}\n"


def test_workdir_errors_are_one_line(
    gkr: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = gkr(*ARGS, "--workdir", str(tmp_path / "absent"), "--dry-run", "--", "python", "train.py")
    assert (missing.exit_code, missing.stderr.splitlines()[-1]) == (
        2,
        f"error: --workdir {tmp_path / 'absent'}: not a folder",
    )
    job = gkr(*ARGS, "--kind", "job", "--workdir", str(tmp_path), "--dry-run", "--", "python", "train.py")
    assert (
        job.stderr.splitlines()[-1] == "error: --workdir: a job has no Ray job runtime environment; use --kind rayjob"
    )
    monkeypatch.setattr(workdir, "LIMIT_BYTES", 10)
    monkeypatch.setattr(workdir.pack, "__defaults__", (10,))
    big = gkr(*ARGS, "--workdir", str(project(tmp_path / "code")), "--dry-run", "--", "python", "train.py")
    assert big.exit_code == 2
    assert "MiB a Ray working_dir may hold" in big.stderr.splitlines()[-1]
