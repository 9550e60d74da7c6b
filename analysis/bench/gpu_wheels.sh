#!/usr/bin/env bash
# Download the wheels analysis/bench/gpu_check.sh installs on a GPU node without a package index: what
# `import hierfl` and the local executor need beyond torch, and pytest for the CUDA tests, at the versions of
# requirements.lock, for CPython 3.11 and 3.12 on manylinux x86_64 — compiled wheels into
# analysis/bench/wheels/<python version>/, pure-Python ones once into analysis/bench/wheels/any/ (about 40 MB,
# numpy being most of it). Run it (or `make gpu-wheels`) where an index is reachable; the folder is ignored by
# git and travels with the work tree as a carried path.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
OUTDIR=analysis/bench/wheels

pins() {  # the pinned versions of requirements.lock (names compared case- and separator-insensitively)
  for name in "$@"; do
    line="$(grep -iE "^${name//[-_]/[-_]}==" requirements.lock | head -1)"
    [ -n "$line" ] || { echo "gpu_wheels.sh: $name is not pinned in requirements.lock" >&2; exit 2; }
    echo "$line"
  done
}
mapfile -t compiled < <(pins numpy pydantic_core PyYAML)
mapfile -t pure < <(pins pydantic typing_extensions annotated-types typing-inspection \
                         pytest pluggy iniconfig packaging Pygments)
platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)
for version in 3.11 3.12; do
  "$PY" -m pip download -q --only-binary=:all: --implementation cp --python-version "$version" "${platforms[@]}" \
    --no-deps -d "$OUTDIR/$version" "${compiled[@]}"
done
"$PY" -m pip download -q --only-binary=:all: --python-version 3.11 --no-deps -d "$OUTDIR/any" "${pure[@]}"
du -sh "$OUTDIR"
