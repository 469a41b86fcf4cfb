#!/usr/bin/env bash
# The main job on the embedded default: serve the bundled sample site on 127.0.0.1, fetch it with
# escalation into a local store (./demo-store), print the state table, then query the store.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export WEB_INDEX_STORE="${WEB_INDEX_STORE:-$PWD/demo-store}"
exec .venv/bin/web-index demo "$@"
