#!/usr/bin/env bash
# Run the checks and the test suite; arguments go to pytest (e.g. `scripts/test.sh tests/test_cli.py -x`).
#
# Before the tests: the layer contracts of docs/DESIGN.md section 1 (import-linter, configured in
# pyproject.toml) and the structural checks of scripts/check_structure.py (no import cycles, no
# function-local imports of changelake modules, module and Session size limits).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/bootstrap.sh"
cd "$repo"
"$repo/.venv/bin/lint-imports" --no-cache
"$repo/.venv/bin/python" "$repo/scripts/check_structure.py" "$repo/src"
exec "$repo/.venv/bin/python" -m pytest -q "$@"
