#!/usr/bin/env bash
# Run the changelake demo in a fresh local warehouse.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/bootstrap.sh"
cd "$repo"
exec "$repo/.venv/bin/python" -m changelake.demo "$@"
