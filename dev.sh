#!/usr/bin/env bash
# rlvr developer entry point: creates/reuses a virtual environment, installs what is needed, runs a job.
#   bash dev.sh quickstart [overrides]   train the tiny CPU model with GRPO (the README's main command)
#   bash dev.sh quickstart tool [overrides]   the same model learns to use a calculator tool
#   bash dev.sh test [pytest args]       ruff + import contracts + mypy + the whole test suite
#   bash dev.sh setup                    only create/refresh the environment
set -euo pipefail
cd "$(dirname "$0")"

VENV="${RLVR_VENV:-.venv}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"

pip_install() {
  # Quiet on success; on failure show what pip said.
  local log="$VENV/pip-install.log"
  if ! "$VENV/bin/python" -m pip install "$@" >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "[dev.sh] pip install $* failed (full log: $log)" >&2
    exit 1
  fi
}

setup() {
  if ! command -v bwrap >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      echo "[dev.sh] installing bubblewrap (code sandbox)"
      (apt-get install -y -q bubblewrap >/dev/null 2>&1 \
        || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1)) \
        || echo "[dev.sh] WARNING: could not install bubblewrap; the code sandbox falls back to unshare"
    else
      echo "[dev.sh] WARNING: bubblewrap (bwrap) is missing; install it for the strongest code sandbox"
    fi
  fi
  if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[dev.sh] creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
  fi
  local stamp
  stamp="$(cat pyproject.toml dev.sh | sha256sum | cut -c1-16)"
  if [[ "$(cat "$VENV/.rlvr-stamp" 2>/dev/null)" != "$stamp" ]]; then
    pip_install --upgrade pip
    if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
      if command -v nvidia-smi >/dev/null 2>&1; then
        echo "[dev.sh] CUDA machine: installing the default torch build"
        pip_install torch
      else
        echo "[dev.sh] no CUDA: installing torch==2.13.0 (CPU)"
        pip_install torch==2.13.0
      fi
    fi
    echo "[dev.sh] installing rlvr and its dev/test dependencies"
    pip_install -e '.[dev]'
    echo "$stamp" > "$VENV/.rlvr-stamp"
  fi
}

run_tests() {
  local bin="$VENV/bin"
  echo "[dev.sh] ruff"; "$bin/ruff" check .
  echo "[dev.sh] import contracts"; "$bin/lint-imports" --no-logo
  echo "[dev.sh] mypy"; "$bin/mypy"
  echo "[dev.sh] pytest"
  set +e
  "$bin/python" -m pytest "$@"
  local rc=$?
  set -e
  if [[ $rc == 5 ]]; then echo "[dev.sh] pytest collected no tests"; return 0; fi
  return $rc
}

cmd="${1:-}"; shift || true
case "$cmd" in
  setup) setup ;;
  test) setup; run_tests "$@" ;;
  quickstart) setup
    if [[ "${1:-}" == tool ]]; then shift; exec "$VENV/bin/rlvr" train configs/tool_quickstart.yaml "$@"; fi
    exec "$VENV/bin/rlvr" train configs/quickstart.yaml "$@" ;;
  *) echo "usage: bash dev.sh {quickstart|test|setup} [args]" >&2; exit 2 ;;
esac
