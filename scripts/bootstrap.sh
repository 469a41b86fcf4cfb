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
# Bytecode compiled once here (~5 s): uv does not by default, and where PYTHONDONTWRITEBYTECODE
# is set every process would compile pyarrow's and polars' Python again (~0.3 s a start).
.tools/bin/uv sync --frozen --all-extras --quiet --compile-bytecode "$@"
