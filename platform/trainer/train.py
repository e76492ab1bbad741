"""The standard training driver: `python train.py configs/config.yaml run.name=example`."""

import sys
from pathlib import Path

# From a checkout (`python platform/trainer/train.py ...`) the package is beside this file, and the
# contract it reads is beside that, installed or not; in the image (/opt/trainer) both are installed
# and there is no src/.
_HERE = Path(__file__).resolve().parent
for _src in (_HERE / "src", _HERE.parent / "contract" / "src"):
    if _src.is_dir() and str(_src) not in sys.path:
        sys.path.insert(0, str(_src))

try:
    from trainer.cli import main
    from trainer.launch.process import exit_process
except ModuleNotFoundError as exc:  # torch, hydra, torchft: only the project's environment has them
    sys.exit(
        f"error: {exc}: run it with the project's Python, `.venv/bin/python {sys.argv[0]} ...` "
        "or after `. .venv/bin/activate` (`make setup` builds .venv)"
    )

if __name__ == "__main__":
    exit_process(main())
