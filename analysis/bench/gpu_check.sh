#!/usr/bin/env bash
# The GPU figures in one command, on a node with torch and CUDA but no package index:
#   bash analysis/bench/gpu_check.sh [gpu_check.py options]     (results under $OUT when it is set)
# Installs what `import hierfl` and the local executor need beyond torch (numpy, pydantic, PyYAML and their
# pure-Python dependencies; pytest for the CUDA tests) from analysis/bench/wheels/ (made by `make gpu-wheels` on a machine with an index),
# only those that do not import already, then runs analysis/bench/gpu_check.py. Ray is not needed.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
WHEELS=analysis/bench/wheels
missing=()
# module to import : requirement that provides it (the versions make gpu-wheels downloads)
# (pytest and its dependencies: for the CUDA tests the check runs at its end)
for pair in numpy:numpy pydantic:pydantic pydantic_core:pydantic_core yaml:PyYAML \
            typing_extensions:typing_extensions annotated_types:annotated-types typing_inspection:typing-inspection \
            pytest:pytest pluggy:pluggy iniconfig:iniconfig packaging:packaging pygments:Pygments; do
  mod="${pair%%:*}"; req="${pair#*:}"
  "$PY" -c "import $mod" 2>/dev/null || missing+=("$req")
done
if ((${#missing[@]})); then
  if [ ! -d "$WHEELS" ]; then
    echo "gpu_check.sh: missing ${missing[*]} and no $WHEELS/ (run 'make gpu-wheels' where a package index is reachable)" >&2
    exit 2
  fi
  py_tag="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  find_links=("--find-links" "$WHEELS/$py_tag" "--find-links" "$WHEELS/any")
  echo "gpu_check.sh: installing ${missing[*]} from $WHEELS (Python $py_tag)"
  "$PY" -m pip install -q --no-index "${find_links[@]}" "${missing[@]}" \
    || "$PY" -m pip install -q --user --no-index "${find_links[@]}" "${missing[@]}"
fi
exec "$PY" analysis/bench/gpu_check.py "$@"
