#!/usr/bin/env bash
# PNG figures from engine_compare.sh's output, one per measure:
#   Benchmarks/Scripts/plot.sh RESULTS.jsonl [OUTDIR]     (OUTDIR defaults to Benchmarks/plots)
# matplotlib comes from a virtual environment of its own (Benchmarks/.venv-plot, pinned version).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=$(realpath "$1")
outdir=$(realpath -m "${2:-$here/../plots}")
venv="$here/../.venv-plot"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "matplotlib==3.9.2"
fi
"$venv/bin/python" "$here/plot.py" "$results" "$outdir"
