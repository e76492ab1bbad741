#!/usr/bin/env bash
# Re-resolve requirements/dev.in into requirements/dev.lock (pinned, with hashes).
# Run after changing a direct dependency; commit both files.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${1:-python3}" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check pip-tools==7.6.2
"$tmp/venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
  --no-emit-index-url --no-emit-find-links -o requirements/dev.lock requirements/dev.in
