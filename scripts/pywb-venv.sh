#!/usr/bin/env bash
# Build .pywb-venv: the real pywb 2.10 for the replay tests (tests/archive/pywb.py), in a
# virtualenv of its own, from the pins in tests/archive/pywb-requirements.txt. pywb pins old
# dependencies, so it never goes into .venv. Idempotent: silent when the venv matches the pins
# (a stamp holds the requirements file's sha256 and the Python version); otherwise rebuilt.
# Needs python3 (3.11) and access to PyPI. On failure: exit 1 with a one-line reason.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.pywb-venv
req=tests/archive/pywb-requirements.txt
stamp="$venv/.stamp"
log="$venv/install.log"

fail() {
  echo "pywb-venv.sh: $*" >&2
  exit 1
}

[ -f "$req" ] || fail "missing $req"
want="$(sha256sum "$req" | cut -d' ' -f1) $(python3 -c 'import sys; print(sys.version.split()[0])')" ||
  fail "python3 or sha256sum not usable"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/wayback" ]; then
  exit 0
fi

rm -rf "$venv"
out="$(python3 -m venv "$venv" 2>&1)" || fail "python3 -m venv failed: $(tail -n1 <<<"$out")"
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --requirement "$req" >"$log" 2>&1; then
  fail "pip install -r $req failed: $(grep -E '^ERROR' "$log" | tail -n1 || true) (log: $log)"
fi
"$venv/bin/python" -m pip check >>"$log" 2>&1 || fail "pip check failed: $(tail -n1 "$log") (log: $log)"
"$venv/bin/wayback" --version >>"$log" 2>&1 || fail "wayback does not run: $(tail -n1 "$log") (log: $log)"
echo "$want" >"$stamp"
