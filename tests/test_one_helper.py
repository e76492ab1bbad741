"""The tests' helpers in one place (issue 40): one free-port helper (tests/ports.py) and one polling loop
(tests/waiting.py); a second copy anywhere under tests/ fails here, as the single-source tests of the code do."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

HOMES = {"tests/ports.py", "tests/waiting.py"}


def _calls(node: ast.AST, name: str) -> list[ast.Call]:
    return [c for c in ast.walk(node) if isinstance(c, ast.Call) and ast.unparse(c.func).endswith(name)]


def free_port_copies(tree: ast.AST) -> list[str]:
    """Functions that bind port 0 only to read the port and close it again (a socket kept listening, or bound to
    pick its source address, is not one)."""
    return [
        f.name
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        and _calls(f, ".getsockname")
        and not _calls(f, ".listen")
        and any(
            isinstance(arg, ast.Tuple) and len(arg.elts) == 2 and ast.unparse(arg.elts[1]) == "0"
            for call in _calls(f, ".bind")
            for arg in call.args
        )
    ]


def polling_copies(tree: ast.AST) -> list[int]:
    """Lines of loops that sleep until something holds: a ``while`` that sleeps or waits, a ``for`` that does and
    breaks or returns (a fake server's injected delay in a loop neither polls nor stops early)."""
    found = []
    for loop in ast.walk(tree):
        if isinstance(loop, ast.While | ast.For) and (_calls(loop, "time.sleep") or _calls(loop, ".wait")):
            stops = any(isinstance(n, ast.Break | ast.Return) for n in ast.walk(loop))
            if isinstance(loop, ast.While) or stops:
                found.append(loop.lineno)
    return found


def _test_sources() -> dict[str, ast.AST]:
    paths = sorted((REPO / "tests").rglob("*.py"))
    return {str(p.relative_to(REPO)): ast.parse(p.read_text()) for p in paths if str(p.relative_to(REPO)) not in HOMES}


def test_one_free_port_helper_and_one_polling_loop() -> None:
    sources = _test_sources()
    ports = {path: names for path, tree in sources.items() if (names := free_port_copies(tree))}
    loops = {path: lines for path, tree in sources.items() if (lines := polling_copies(tree))}
    assert ports == {}, "use tests.ports.free_port"
    assert loops == {}, "use tests.waiting.until"


def test_a_second_copy_is_found() -> None:
    copy = ast.parse(
        "def _free_port():\n    with socket.socket() as s:\n        s.bind(('127.0.0.1', 0))\n"
        "        return s.getsockname()[1]\n\n"
        "def held():\n    s = socket.socket()\n    s.bind(('', 0))\n    s.listen()\n    return s\n\n"
        "def wait(ready):\n    deadline = time.monotonic() + 5\n    while not ready():\n        time.sleep(0.1)\n\n"
        "def tries(ready, stop):\n    for _ in range(100):\n        if ready():\n            return\n"
        "        stop.wait(0.05)\n\n"
        "def slow(delays):\n    for d in delays:\n        time.sleep(d)\n"
    )
    assert free_port_copies(copy) == ["_free_port"]
    assert polling_copies(copy) == [14, 18]
    assert free_port_copies(ast.parse(Path(REPO / "tests/ports.py").read_text())) == ["free_port"]
