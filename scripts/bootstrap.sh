#!/usr/bin/env bash
# Create .venv from uv.lock, every extra included (the tests use them all).
# Needs only python3 (>=3.11) and access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9
if [ ! -x .tools/bin/uv ]; then
  python3 -m venv .tools
  .tools/bin/pip install --quiet --disable-pip-version-check "uv==${UV_VERSION}"
fi
.tools/bin/uv sync --frozen --all-extras --quiet "$@"
