"""A trainer process ends without Python's final garbage collection (trainer/launch/process.py): about 3 s of one
core per process after the run's last event, paid by every rank, launcher and generator in turn."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import REPO

# An object in a reference cycle, held by a global to the end: then only the final collection frees it, and
# its __del__ says so.
CYCLE = (
    "class Held:\n"
    "    def __del__(self):\n"
    "        print('collected at exit', flush=True)\n"
    "held = Held()\n"
    "held.me = held\n"
)
ENTRY_POINTS = (
    "platform/trainer/train.py",
    "platform/trainer/src/trainer/launch/worker_main.py",
    "platform/trainer/src/trainer/rl/generator_main.py",
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)


def test_exit_process_keeps_the_exit_code_and_skips_the_final_collection() -> None:
    plain = _run(CYCLE + "import sys\nsys.exit(3)\n")
    assert (plain.returncode, plain.stdout) == (3, "collected at exit\n")  # what Python does by itself
    ours = _run(CYCLE + "from trainer.launch.process import exit_process\nexit_process(3)\n")
    assert (ours.returncode, ours.stdout, ours.stderr) == (3, "", "")


def _main_block_calls(path: str) -> list[str]:
    tree = ast.parse((REPO / path).read_text())
    blocks = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    return [ast.unparse(call.func) for block in blocks for call in ast.walk(block) if isinstance(call, ast.Call)]


def test_every_process_of_a_run_ends_through_it() -> None:
    assert {path: "exit_process" in _main_block_calls(path) for path in ENTRY_POINTS} == dict.fromkeys(
        ENTRY_POINTS, True
    )
