#!/usr/bin/env bash
# GPU check: the CUDA test subset, the CUDA graph tests on real graphs, benchmark (b) and the training step on one
# CUDA device, in under 10 minutes.
#
# On a machine with PyPI, prepare the wheelhouse .whl/ (git-ignored; carried to the GPU machine):
#     benchmarks/gpu_check.sh --prepare
# It holds this package, lightning-thunder 0.2.6, litgpt and the few of their needs that the GPU image lacks, built
# for CPython 3.12 on x86-64 -- not torch: the GPU machine's preinstalled CUDA torch is used. Drop an nvFuser wheel
# (nvfuser-cu*) into .whl/ to have the nvFuser tests and executor run too.
#
# On the GPU machine, from the repository root:
#     benchmarks/gpu_check.sh
# Steps (each under its own timeout; GPU_CHECK_STEPS names a subset of "tests cudagraph models training",
# GPU_CHECK_MODELS a subset of the models, written to models_cuda_<size>_<models>, and GPU_CHECK_TRAINING_TIMEOUT the
# training step's seconds, 420 by default):
# install .whl/ offline into /tmp/site (no dependency resolution: the image's
# packages are used as they are), `pytest -m cuda` (Triton kernels via the torchcompile executor, the real CUDA graph
# transform, nvFuser when installed), the CUDA graph transform tests on real CUDA graphs
# (tests/thunder_ext/test_cudagraph.py, emulated on CPU elsewhere: arguments sharing storage on the first call, cache
# hits and changing aliasing, the un-graphed fallback, the cudagraph_unsafe split, the report;
# EFFECTS_REAL_CUDA_GRAPHS=1 makes them fail rather than emulate), benchmark (b) on CUDA (eager, torch.compile,
# thunder.jit, thunder_ext.jit; in-process so compilations share caches), then the whole training step on CUDA
# (benchmarks/training_step.py). Everything is written to benchmarks/results/ (gpu_check_env.txt, gpu_pytest.txt,
# gpu_cudagraph.txt, models_cuda_<size>.{json,md}, training_step_cuda.{json,md}) and, where set, copied to $OUT.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WHL="$ROOT/.whl"
RESULTS="$ROOT/benchmarks/results"
SIZE="${GPU_CHECK_SIZE:-medium}"
# which steps run (a rerun within a short lease takes fewer), and the models of benchmark (b)
STEPS="${GPU_CHECK_STEPS:-tests cudagraph models training}"
MODELS="${GPU_CHECK_MODELS:-cnn_bn kv_decoder adam residual_mlp}"
MODELS_NAME="models_cuda_$SIZE${GPU_CHECK_MODELS:+_${GPU_CHECK_MODELS// /_}}"

PY="${PYTHON:-python3}"
# the GPU image's interpreter; pure-Python wheels install anywhere, compiled ones (optree) must match it
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
        --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
NEEDS=("lightning-thunder==0.2.6" "looseversion==1.3.0" optree dill litgpt "jsonargparse<=4.41")

if [[ "${1:-}" == "--prepare" ]]; then
    rm -rf "$WHL" && mkdir -p "$WHL"
    "$PY" -m pip wheel -q --no-deps -w "$WHL" "$ROOT"
    "$PY" -m pip download -q --no-deps "${TARGET[@]}" -d "$WHL" "${NEEDS[@]}"
    du -sh "$WHL"
    exit 0
fi

mkdir -p "$RESULTS"
"$PY" - <<'PYTHON' | tee "$RESULTS/gpu_check_env.txt"
import torch
assert torch.cuda.is_available(), "gpu_check.sh needs a CUDA device (torch.cuda.is_available() is False)"
print(f"torch {torch.__version__} cuda {torch.version.cuda} device {torch.cuda.get_device_name(0)}")
PYTHON
# --- install (offline, from the carried wheels, beside the image's packages; torch stays as preinstalled) ----------
shopt -s nullglob
wheels=("$WHL"/*.whl)
if (( ${#wheels[@]} == 0 )); then
    echo "no wheels in $WHL: run 'benchmarks/gpu_check.sh --prepare' on a machine with PyPI access" >&2
    exit 2
fi
timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${wheels[@]}"
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PYTHON' | tee -a "$RESULTS/gpu_check_env.txt"
import importlib.util
from importlib.metadata import version
print("lightning-thunder", version("lightning-thunder"), "| thunder-effects", version("thunder-effects"),
      "| nvfuser", "installed" if importlib.util.find_spec("nvfuser") else "not installed")
PYTHON

# --- CUDA tests ------------------------------------------------------------------------------------------------
status=0
step() { [[ " $STEPS " == *" $1 "* ]]; }
if step tests; then
    timeout 140 "$PY" -m pytest -q -n 8 -m cuda tests -p no:cacheprovider 2>&1 | tee "$RESULTS/gpu_pytest.txt" \
        || status=$?
fi

# --- the CUDA graph transform on real CUDA graphs --------------------------------------------------------------------
if step cudagraph; then
    EFFECTS_REAL_CUDA_GRAPHS=1 timeout 70 "$PY" -m pytest -q -n 4 tests/thunder_ext/test_cudagraph.py \
        -p no:cacheprovider 2>&1 | tee "$RESULTS/gpu_cudagraph.txt" || status=$?
fi

# --- benchmark (b) on CUDA -------------------------------------------------------------------------------------
if step models; then
    # shellcheck disable=SC2086 # the model names are words
    timeout 140 "$PY" -m benchmarks.models --device cuda --size "$SIZE" --in-process --runs 30 \
        --models $MODELS --compilers eager torch.compile thunder.jit thunder_ext.jit --name "$MODELS_NAME" \
        || status=$?
fi

# --- the whole training step on CUDA ---------------------------------------------------------------------------
if step training; then
    # stock thunder.jit left out: it fails on clip_grad_norm_ (gpu_check.md) after minutes of compiling the forward
    timeout "${GPU_CHECK_TRAINING_TIMEOUT:-420}" "$PY" benchmarks/training_step.py --device cuda --threads 16 \
        --rounds 3 --only torch.compile thunder_ext.jit "thunder_ext.jit torchcompile" || status=$?
fi

if [[ -n "${OUT:-}" ]]; then
    cp "$RESULTS"/gpu_*.txt "$RESULTS/$MODELS_NAME".* "$RESULTS"/training_step_cuda.* "$OUT"/ 2>/dev/null || true
fi
echo "gpu_check.sh finished with status $status (results in $RESULTS)"
exit "$status"
