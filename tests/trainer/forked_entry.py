"""An entry point for tests/trainer/test_forked.py: says what its fork got, then exits with a code or sleeps."""

from __future__ import annotations

import os
import sys
import time

import torch


def main() -> int:
    print(f"threads {torch.get_num_threads()} mark {os.environ.get('MARK')} argv {sys.argv[1:]}", flush=True)
    if sys.argv[1] == "modules":  # what the fork got imported by the forkserver
        print(f"torch._dynamo {'torch._dynamo' in sys.modules}", flush=True)
    if sys.argv[1] == "sleep":
        time.sleep(600)
    return int(sys.argv[2])
