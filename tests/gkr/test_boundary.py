"""gkr reads the generated registry and never the fleet model: no import of fleet, at any depth."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tests.gkr.conftest import EXAMPLES, registry_folder

SOURCE = Path(__file__).resolve().parents[2] / "platform" / "gkr" / "src" / "gkr"


def test_no_gkr_module_imports_fleet() -> None:
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            assert not [m for m in modules if m.split(".")[0] == "fleet"], f"{path.name}:{node.lineno}"


def test_a_dry_run_loads_neither_fleet_nor_pydantic() -> None:
    job = str(EXAMPLES / "pretrain-128-nodes.yaml")
    script = (
        "import json, sys\n"
        "from gkr.cli import main\n"
        "try:\n"
        f"    main(['submit', '--registry', {str(registry_folder())!r}, '-f', {job!r}, '--dry-run'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    loaded = set(json.loads(result.stderr.splitlines()[-1]))
    assert {"gkr", "contract", "safeyaml"} <= loaded
    assert not loaded & {"fleet", "pydantic", "jsonschema"}
