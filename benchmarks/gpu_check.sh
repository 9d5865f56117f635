#!/usr/bin/env bash
# GPU check: the CUDA test subset, the CUDA graph tests on real graphs, and benchmark (b) on one CUDA device, in
# under 10 minutes.
#
# On a machine with internet (PyPI), prepare the wheelhouse .whl/ (git-ignored; carried to the GPU machine):
#     benchmarks/gpu_check.sh --prepare
# It holds this package, lightning-thunder 0.2.6 and its dependencies, pytest and hypothesis -- not torch:
# the GPU machine's preinstalled CUDA torch is used. Drop an nvFuser wheel (nvfuser-cu*) into .whl/ to have the
# nvFuser tests and executor run too.
#
# On the GPU machine, from the repository root:
#     benchmarks/gpu_check.sh
# Steps (each under its own timeout): install from .whl/ offline, `pytest -m cuda` (Triton kernels via the
# torchcompile executor, the real CUDA graph transform, nvFuser when installed), the CUDA graph transform tests on
# real CUDA graphs (tests/thunder_ext/test_cudagraph.py, emulated on CPU elsewhere: arguments sharing storage on the
# first call, cache hits and changing aliasing, the un-graphed fallback, the cudagraph_unsafe split, the report;
# EFFECTS_REAL_CUDA_GRAPHS=1 makes them fail rather than emulate), then benchmark (b) on CUDA
# (eager, torch.compile, thunder.jit, thunder_ext.jit; in-process so compilations share caches). Everything is
# written to benchmarks/results/ (gpu_check_env.txt, gpu_pytest.txt, gpu_cudagraph.txt,
# models_cuda_<size>.{json,md}).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WHL="$ROOT/.whl"
RESULTS="$ROOT/benchmarks/results"
SIZE="${GPU_CHECK_SIZE:-medium}"

if [[ "${1:-}" == "--prepare" ]]; then
    rm -rf "$WHL" && mkdir -p "$WHL"
    python -m pip wheel --no-deps -w "$WHL" "$ROOT"
    # torch==2.13.0 pins the resolver to the local CPU wheel; it is removed again below
    python -m pip download -d "$WHL" "lightning-thunder==0.2.6" pytest hypothesis "torch==2.13.0"
    rm -f "$WHL"/torch-*.whl "$WHL"/nvidia_*.whl "$WHL"/triton-*.whl
    du -sh "$WHL"
    exit 0
fi

mkdir -p "$RESULTS"
python - <<'PY' | tee "$RESULTS/gpu_check_env.txt"
import torch
assert torch.cuda.is_available(), "gpu_check.sh needs a CUDA device (torch.cuda.is_available() is False)"
print(f"torch {torch.__version__} cuda {torch.version.cuda} device {torch.cuda.get_device_name(0)}")
PY

# --- install (offline, from the carried wheels; torch stays as preinstalled) ---------------------------------
shopt -s nullglob
wheels=("$WHL"/thunder_effects-*.whl)
if (( ${#wheels[@]} == 0 )); then
    echo "no wheels in $WHL: run 'benchmarks/gpu_check.sh --prepare' on a machine with PyPI access" >&2
    exit 2
fi
nvfuser=("$WHL"/nvfuser*.whl)
# resolve offline against what is installed: the preinstalled CUDA torch satisfies lightning-thunder's torch
# requirement, so only missing packages come from the wheelhouse
timeout 90 python -m pip install -q --no-index --find-links "$WHL" "thunder-effects[thunder,test]"
if (( ${#nvfuser[@]} > 0 )); then
    timeout 60 python -m pip install -q --no-index --find-links "$WHL" "${nvfuser[@]}" \
        || echo "nvFuser wheel did not install; its tests will skip" | tee -a "$RESULTS/gpu_check_env.txt"
fi
python - <<'PY' | tee -a "$RESULTS/gpu_check_env.txt"
import importlib.util
from importlib.metadata import version
print("lightning-thunder", version("lightning-thunder"), "| thunder-effects", version("thunder-effects"),
      "| nvfuser", "installed" if importlib.util.find_spec("nvfuser") else "not installed")
PY

# --- CUDA tests ------------------------------------------------------------------------------------------------
status=0
timeout 170 python -m pytest -q -m cuda tests -p no:cacheprovider 2>&1 | tee "$RESULTS/gpu_pytest.txt" \
    || status=$?

# --- the CUDA graph transform on real CUDA graphs --------------------------------------------------------------------
EFFECTS_REAL_CUDA_GRAPHS=1 timeout 100 python -m pytest -q tests/thunder_ext/test_cudagraph.py -p no:cacheprovider \
    2>&1 | tee "$RESULTS/gpu_cudagraph.txt" || status=$?

# --- benchmark (b) on CUDA -------------------------------------------------------------------------------------
timeout 210 python -m benchmarks.models --device cuda --size "$SIZE" --in-process --runs 30 \
    --compilers eager torch.compile thunder.jit thunder_ext.jit --name "models_cuda_$SIZE" \
    || status=$?

echo "gpu_check.sh finished with status $status (results in $RESULTS)"
exit "$status"
