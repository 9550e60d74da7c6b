#!/usr/bin/env bash
# Download the wheels analysis/bench/gpu_check.sh installs on a GPU node without a package index: what
# `import hierfl` and the local executor need beyond torch, at the versions of requirements.lock, for
# CPython 3.11 and 3.12 on manylinux x86_64, into analysis/bench/wheels/<python version>/ (about 40 MB,
# numpy being most of it). Run it (or `make gpu-wheels`) where an index is reachable; the folder is ignored
# by git and travels with the work tree as a carried path.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
OUTDIR=analysis/bench/wheels
pins=()
for name in numpy pydantic pydantic_core PyYAML typing_extensions annotated-types typing-inspection; do
  # the pinned version of requirements.lock (names compared case- and separator-insensitively)
  line="$(grep -iE "^${name//[-_]/[-_]}==" requirements.lock | head -1)"
  [ -n "$line" ] || { echo "gpu_wheels.sh: $name is not pinned in requirements.lock" >&2; exit 2; }
  pins+=("$line")
done
for version in 3.11 3.12; do
  "$PY" -m pip download -q --only-binary=:all: --implementation cp --python-version "$version" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --no-deps -d "$OUTDIR/$version" "${pins[@]}"
done
du -sh "$OUTDIR"
