"""The standard training driver: `python train.py configs/config.yaml run.name=example`."""

import sys

from trainer.cli import main

if __name__ == "__main__":
    sys.exit(main())
