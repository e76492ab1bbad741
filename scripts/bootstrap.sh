#!/usr/bin/env bash
# Build the development environment at .venv/ from the committed lock.
# Needs only Python 3.11+ (the interpreter is $1, default python3). Every
# package comes pinned and hash-checked from requirements/dev.lock; then each
# component under platform/ is installed editable, without its own resolution.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3}

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "error: $python is missing or older than Python 3.11; install Python 3.11+ or run make PYTHON=/path/to/python3.11" >&2
  exit 2
fi

# A venv made by another interpreter version cannot be upgraded in place.
if [ -x .venv/bin/python ] && ! .venv/bin/python -c 'import sys' 2>/dev/null; then
  rm -rf .venv
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
# Each top-level module has one owner and each command one declaration, before anything is installed
# editable (an editable install would map a second `safeyaml/` as readily as the first).
"$python" scripts/run_checkout.py --check

.venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/dev.lock
# PyTorch, pinned (requirements/torch.txt explains why it is not hash-locked).
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements/torch.txt
for component in platform/*/ infra/; do
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$component"
done
if ! problems=$(.venv/bin/python -m pip check --disable-pip-version-check 2>&1); then
  echo "error: the environment's packages do not fit together: $problems" >&2
  exit 1
fi

# checkov pins its own dependencies: give it a virtualenv of its own.
if [ ! -x .venv/tools/checkov/bin/python ]; then
  "$python" -m venv .venv/tools/checkov
fi
.venv/tools/checkov/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/checkov.lock
ln -sf ../tools/checkov/bin/checkov .venv/bin/checkov

# network-config-analyzer pins its own dependencies too (tests/tenancy/test_network.py runs it).
if [ ! -x .venv/tools/nca/bin/python ]; then
  "$python" -m venv .venv/tools/nca
fi
.venv/tools/nca/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/nca.lock
ln -sf ../tools/nca/bin/nca .venv/bin/nca

# The CDK Terrain CLI, from infra/package-lock.json, run by the project's own Node.js:
# .venv/bin/cdktn calls scripts/cdktn, which puts .venv/bin first whatever PATH holds.
PATH="$PWD/.venv/bin:$PATH" npm ci --prefix infra --ignore-scripts --no-audit --no-fund --loglevel=error
scripts/cdktn --install-wrapper .venv/bin
touch .venv/.installed
echo "environment ready: .venv ($(.venv/bin/python --version))"
