#!/usr/bin/env bash
# Lint, strict typing, import layers, then the whole test suite. Run via `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
echo "== ruff"; .venv/bin/ruff check src tests bench; .venv/bin/ruff format --check src tests bench
echo "== mypy --strict"; .venv/bin/mypy
echo "== lint-imports (layers)"; .venv/bin/lint-imports --no-cache
echo "== pytest"; .venv/bin/python -m pytest "$@"
