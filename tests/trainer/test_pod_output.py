"""Under KubeRay a replica group's output goes to the container's stdout (kubectl logs), not Ray's files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trainer.launch.pod_output import in_pod


def test_a_process_writes_python_and_native_output_to_the_pods_stdout(tmp_path: Path) -> None:
    container = tmp_path / "container-stdout"
    container.write_text("")
    code = (
        "import os, sys, logging\n"
        "from pathlib import Path\n"
        "from trainer.launch.pod_output import to_pod_output\n"
        f"assert to_pod_output(Path({str(container)!r}))\n"
        "logging.basicConfig(format='%(name)s %(message)s')\n"
        "logging.getLogger('trainer').warning('from logging')\n"
        "print('from print', flush=True)\n"
        "os.write(2, b'from fd 2\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == done.stderr == ""  # nothing left on the process's own streams (Ray's files)
    lines = container.read_text().splitlines()
    assert sorted(lines) == ["from fd 2", "from print", "trainer from logging"]


def test_an_unopenable_target_changes_nothing(tmp_path: Path) -> None:
    from trainer.launch.pod_output import to_pod_output

    assert to_pod_output(tmp_path / "missing" / "stdout") is False


def test_only_a_pod_redirects() -> None:
    assert in_pod({"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert not in_pod({})
