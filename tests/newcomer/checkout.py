"""A newcomer's machine, approximated: a copy of the checkout and a PATH without the tools .venv provides."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from fleet.gitops.validate import crd_roots
from tests.conftest import REPO

# Tools the project brings in .venv/bin (or that a deploy needs): the machine's own must never be used.
HIDDEN = {"node", "nodejs", "npm", "npx", "corepack", "kubectl", "kustomize", "terraform", "tofu", "cdktn", "gcloud"}
HIDDEN |= {"helm", "gkr", "meridian", "meridian-review", "meridian-synth", "preflight", "warden", "python"}
OLD = 946684800  # 2000-01-01: older than any .venv/.installed, so make never rebuilds the shared .venv


def hidden_path(bin_dir: Path) -> str:
    """A folder of links to /usr/bin and /bin minus HIDDEN: the machine's other tools, none of the project's."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for folder in (Path("/usr/bin"), Path("/bin")):
        for tool in sorted(folder.iterdir()) if folder.is_dir() else []:
            if tool.name not in HIDDEN and not (bin_dir / tool.name).exists():
                (bin_dir / tool.name).symlink_to(tool)
    return str(bin_dir)


def copy_checkout(dest: Path) -> Path:
    """The tracked files, dated 2000, with .venv and infra/node_modules linked to this checkout's."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True)
    for rel in files.stdout.splitlines():
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
            os.utime(dest / rel, (OLD, OLD))
    for link in (".venv", "infra/node_modules"):
        (dest / link).symlink_to(REPO / link, target_is_directory=True)
    return dest


def environment(root: Path, path: str, home: Path) -> dict[str, str]:
    components = [root / "platform" / p.name / "src" for p in sorted((REPO / "platform").iterdir())]
    return {
        "PATH": path,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        # The copy's code, not wherever .venv's editable installs point.
        "PYTHONPATH": os.pathsep.join([*(str(c) for c in components if c.is_dir()), str(root / "infra")]),
        "MERIDIAN_CRDS": os.pathsep.join(str(p) for p in crd_roots(REPO)),
    }


def rebuilds_venv(root: Path, command: str, env: dict[str, str]) -> bool:
    """Whether `make ...` would run bootstrap.sh (asked with make -n; never run it against the shared .venv)."""
    if not command.startswith("make"):
        return False
    dry = subprocess.run(
        re.sub(r"^make\b", "make -n", command),
        shell=True,
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return "bootstrap.sh" in dry.stdout
