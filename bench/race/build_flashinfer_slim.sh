#!/usr/bin/env bash
# Build the folder that travels to the lent GPU machine for the race check (bench/results/README.md).
#
# On this CPU machine: download flashinfer-python (the releases in VDF_FLASHINFER_VERSIONS) and
# the apache-tvm-ffi cp312 wheel from the package index into a cache outside the repository,
# compile FlashInfer's bf16 batch-decode module ahead of time with the local nvcc for sm_90a
# (through FlashInfer's own JIT spec, with a libcuda link stub), and repack each wheel slim
# (Python + the AOT module) into the git-ignored carry folder .device/race/. Nothing here is
# committed: the carry folder is ignored, the cache lies outside the repository.
#
#   bench/race/build_flashinfer_slim.sh            # then: bench/race/run_on_gpu.sh there
#
# Needs: python3.11 (or PYTHON), nvcc (CUDA 13.0 here; CUDA_HOME), gcc, network to the index.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${VDF_CACHE:-$HOME/.cache/vllm-dual-fast}
CARRY=${VDF_CARRY:-$ROOT/.device/race}
VERSIONS=${VDF_FLASHINFER_VERSIONS:-0.7.2.post1 0.6.16.post3}
ARCH=${VDF_CUDA_ARCH:-9.0a}          # the lent H200; an RTX 3090 would be 8.6
HEAD_DIMS=${VDF_HEAD_DIMS:-256}
TVM_FFI_SPEC=${VDF_TVM_FFI:-apache-tvm-ffi>=0.1.11,<0.2}
PY=${PYTHON:-python3.11}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

command -v "$CUDA_HOME/bin/nvcc" >/dev/null || { echo "no nvcc under CUDA_HOME=$CUDA_HOME" >&2; exit 2; }
mkdir -p "$CACHE/wheels" "$CACHE/stubs" "$CARRY/wheels" "$CARRY/deps"

# 1. A build environment: a CPU torch only lets FlashInfer's JIT spec render its sources.
BENV=$CACHE/buildenv
if [ ! -x "$BENV/bin/python" ]; then
    "$PY" -m venv "$BENV"
fi
"$BENV/bin/python" -m pip install -q --disable-pip-version-check torch "$TVM_FFI_SPEC" \
    ninja numpy packaging requests tabulate tqdm einops click nvidia-ml-py

# 2. Wheels from the package index, cached.
for v in $VERSIONS; do
    ls "$CACHE/wheels/flashinfer_python-$v-"*.whl >/dev/null 2>&1 ||
        "$BENV/bin/python" -m pip download -q --no-deps --only-binary=:all: \
            -d "$CACHE/wheels" "flashinfer-python==$v"
done
ls "$CACHE/wheels"/apache_tvm_ffi-*cp312*.whl >/dev/null 2>&1 ||
    "$BENV/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$CACHE/wheels" "$TVM_FFI_SPEC"

# 3. libcuda link stub: the module links -lcuda; at run time the driver's libcuda.so.1 is used.
if [ ! -f "$CACHE/stubs/libcuda.so" ]; then
    echo 'void vdf_libcuda_link_stub(void) {}' > "$CACHE/stubs/stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$CACHE/stubs/libcuda.so" "$CACHE/stubs/stub.c"
fi

# 4. Per release: install, compile the decode module(s) ahead of time, repack slim.
rm -f "$CARRY"/wheels/*.whl "$CARRY"/deps/*.whl
for v in $VERSIONS; do
    whl=$(find "$CACHE/wheels" -maxdepth 1 -name "flashinfer_python-$v-*.whl" | sort | head -n1)
    site=$CACHE/fi-$v
    [ -d "$site/flashinfer" ] ||
        "$BENV/bin/python" -m pip install -q --no-deps --target "$site" "$whl"
    rm -rf "$CACHE/aot-$v"
    echo "== compiling bf16 batch decode, CUDA-core and tensor-core (fa2) paths, head_dim" \
        "$HEAD_DIMS, for arch $ARCH with FlashInfer $v"
    # shellcheck disable=SC2086  # $HEAD_DIMS: one argument per head size
    (cd "$CACHE" && env PYTHONPATH="$site" FLASHINFER_WORKSPACE_BASE="$CACHE/ws-$v" \
        FLASHINFER_CUDA_ARCH_LIST="$ARCH" FLASHINFER_EXTRA_LDFLAGS="-L$CACHE/stubs" \
        "$BENV/bin/python" "$ROOT/bench/race/build_decode_aot.py" "$CACHE/aot-$v" \
        --tensor-cores $HEAD_DIMS)
    "$BENV/bin/python" "$ROOT/bench/race/slim_wheel.py" "$whl" "$CACHE/aot-$v" "$CARRY/wheels"
done
cp "$(find "$CACHE/wheels" -maxdepth 1 -name 'apache_tvm_ffi-*cp312*.whl' | sort | tail -n1)" "$CARRY/deps/"

git -C "$ROOT" check-ignore -q "$CARRY" || { echo "$CARRY is not git-ignored" >&2; exit 1; }
du -sh "$CARRY"/wheels/* "$CARRY"/deps/*; du -sh "$CARRY"
