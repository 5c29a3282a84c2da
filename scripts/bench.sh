#!/usr/bin/env bash
# Run the benchmarks and record them in bench/RESULTS.md; arguments go to `python -m bench`,
# e.g. `scripts/bench.sh --scale 0.05 --only update` for a quick run (see `--help`).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/bootstrap.sh"
cd "$repo"
export CHANGELAKE_SPARK_MASTER="${CHANGELAKE_SPARK_MASTER:-local[2]}"
exec "$repo/.venv/bin/python" -m bench "$@"
