"""CDK Terrain entry point (`cdktn synth`, `cdktn deploy <stack>` run it from infra/).

The fleet spec is ../fleet.yaml unless MERIDIAN_FLEET names another;
MERIDIAN_BACKEND=local keeps Terraform state in infra/.state/ instead of the
spec's GCS bucket. CDKTF_OUTDIR (set by the CLI) says where to write.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from meridian_infra.synth import synth_from_env  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(synth_from_env())
