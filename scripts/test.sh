#!/usr/bin/env bash
# Lint, strict typing, then the whole test suite. Run via `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
echo "== ruff"; .venv/bin/ruff check src tests bench
echo "== mypy --strict"; .venv/bin/mypy
echo "== pytest"; .venv/bin/python -m pytest "$@"
