"""The standard training driver: `python train.py configs/config.yaml run.name=example`."""

import sys
from pathlib import Path

# From a checkout (`python platform/trainer/train.py ...`) the package is beside this file,
# installed or not; in the image (/opt/trainer) it is installed and there is no src/.
_SRC = Path(__file__).resolve().parent / "src"
if _SRC.is_dir() and str(_SRC) not in sys.path:
    sys.path.insert(0, str(_SRC))

try:
    from trainer.cli import main
except ModuleNotFoundError as exc:  # torch, hydra, torchft: only the project's environment has them
    sys.exit(
        f"error: {exc}: run it with the project's Python, `.venv/bin/python {sys.argv[0]} ...` "
        "or after `. .venv/bin/activate` (`make setup` builds .venv)"
    )

if __name__ == "__main__":
    sys.exit(main())
