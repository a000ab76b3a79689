#!/usr/bin/env bash
# Make (or refresh) the project's virtual environment; prints its path.
#
# The environment lives outside the checkout, in $HSP_VENV (default ~/.cache/hybridsearch/venv),
# so fresh clones reuse the multi-gigabyte torch install. torch comes from PyPI (no local CPU wheel
# is shipped on our machines; PyPI's Linux wheel runs on CPU). Re-running only installs what changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VENV="${HSP_VENV:-$HOME/.cache/hybridsearch/venv}"
PY="${HSP_PYTHON:-python3}"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "[setup] creating $VENV" >&2
  "$PY" -m venv "$VENV"
  fresh=1
  "$VENV/bin/pip" install -q --upgrade pip >&2
fi
stamp="$VENV/.hsp-installed-$(sha1sum "$root/pyproject.toml" | cut -c1-12)"
if [[ ! -f "$stamp" ]] || ! "$VENV/bin/python" -c "import hybridsearch" 2>/dev/null \
   || [[ "$("$VENV/bin/python" -c 'import hybridsearch,os;print(os.path.realpath(hybridsearch.__file__))' 2>/dev/null)" != "$root"/* ]]; then
  if [[ -n "${fresh:-}" ]]; then
    echo "[setup] installing hybridsearch-platform[dev,onnx] and torch (several minutes the first time)" >&2
  else
    echo "[setup] updating the editable install of hybridsearch-platform[dev,onnx]" >&2
  fi
  "$VENV/bin/pip" install -q -e "$root[dev,onnx]" >&2
  touch "$stamp"
fi
echo "$VENV"
