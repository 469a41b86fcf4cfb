#!/usr/bin/env bash
# The main job on the embedded default: a local store in ./demo-store.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export WEB_INDEX_STORE="${WEB_INDEX_STORE:-$PWD/demo-store}"
if .venv/bin/web-index demo --help >/dev/null 2>&1; then
  exec .venv/bin/web-index demo
fi
exec .venv/bin/python scripts/store_demo.py
