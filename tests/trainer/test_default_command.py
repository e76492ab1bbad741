"""The training image's default command (Dockerfile CMD after ENTRYPOINT) runs and prints the usage."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

TRAINER = Path(__file__).resolve().parents[2] / "platform" / "trainer"


def test_the_images_default_command_prints_usage() -> None:
    dockerfile = (TRAINER / "Dockerfile").read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", dockerfile, re.M)[1])  # type: ignore[index]
    cmd = json.loads(re.search(r"^CMD (.+)$", dockerfile, re.M)[1])  # type: ignore[index]
    assert entrypoint == ["python", "train.py"]
    # The image's WORKDIR /opt/trainer holds train.py and configs/ (copied from platform/trainer).
    done = subprocess.run(
        [sys.executable, "train.py", *cmd], cwd=TRAINER, capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("usage: train.py CONFIG.yaml")
