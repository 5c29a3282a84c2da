#!/usr/bin/env bash
# Run the test suite; arguments go to pytest (e.g. `scripts/test.sh tests/test_cli.py -x`).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/bootstrap.sh"
cd "$repo"
exec "$repo/.venv/bin/python" -m pytest -q "$@"
