#!/usr/bin/env bash
# The device check on a lent NVIDIA H200 (docs/performance.md, "On a real GPU").
# Carried: .gl/ (Debian's GL loaders: libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
# and .whl/ (moderngl, glcontext, lark, platformdirs for the machine's Python 3.12).
# Runs the GLSL equivalence tests and the Lorenz sweep on the GPU; writes under $OUT.
set -u
OUT=${OUT:-/tmp/vgpu-device}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
probe='import moderngl; c = moderngl.create_standalone_context(backend="egl", require=430); print(c.info["GL_RENDERER"], c.info["GL_VERSION"])'
if ! python3 -c "$probe" 2>/dev/null; then
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
python3 -c "$probe" 2>&1 | tee "$OUT/renderer.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$OUT/renderer.txt"

# 1. equivalence with the numpy reference, on the GPU (no glslangValidator there: goldens left out)
timeout 200 python3 -m pytest -q -p no:cacheprovider -x --no-header \
    tests/backends/glsl/test_glsl_equivalence.py tests/conformance/test_examples.py tests/backends/glsl/test_kernel_cache.py \
    tests/codegen/test_generated_programs.py 2>&1 | tail -25 | tee "$OUT/tests.txt"

# 2. the Lorenz sweep: GLSL, hand GLSL and the numpy reference at 1M; the GLSL columns up to 8M
timeout 150 python3 -m benchmarks lorenz --n 1048576 --columns GLSL,ref --no-peers \
    --repeat 1 --markdown --json "$OUT/lorenz_1m.json" 2>&1 | tee "$OUT/lorenz_1m.txt"
timeout 150 python3 -m benchmarks lorenz --n 2097152,4194304,8388608 --columns GLSL --no-peers \
    --repeat 3 --markdown --json "$OUT/lorenz_8m.json" 2>&1 | tee "$OUT/lorenz_8m.txt"

# 3. the cuda backend (if NVRTC came along: cuda-bindings' cp312 wheel in .whl/, and the
#    nvidia-cuda-nvrtc-cu12 wheel there too or its two libraries as .nvrtc/nvrtc.tar.xz:
#    nvidia/cuda_nvrtc/lib/libnvrtc.so.12 and libnvrtc-builtins.so.12.9, ~25 MB packed)
if [ -f .nvrtc/nvrtc.tar.xz ]; then tar -C /tmp/site -xJf .nvrtc/nvrtc.tar.xz; fi
python3 -c 'from vgpu_compiler.backends import get; print("cuda:", get("cuda").available())' \
    2>&1 | tee -a "$OUT/renderer.txt"
# the equivalence suite on cuda: every test whose id names cuda (the examples, the feature
# probes, tests/test_cuda_*.py); VGPU_REQUIRE_CUDA: a missing GPU fails instead of skipping
VGPU_REQUIRE_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider --no-header -k cuda \
    tests/backends/cuda/test_cuda_equivalence.py tests/backends/cuda/test_cuda_host.py tests/conformance/test_examples.py \
    tests/project/test_docs_truth.py 2>&1 | tail -25 | tee "$OUT/tests_cuda.txt"
# the Lorenz sweep (fixed rk4, 1000 steps, float32) on cuda beside GLSL, 1M to 8M
# trajectories: a table on stdout, JSON under $OUT (DiffEqGPU's published figure: 8,388,608
# trajectories in 145 ms on a V100)
timeout 200 python3 -m benchmarks lorenz --n 1048576,2097152,4194304,8388608 \
    --columns cuda,GLSL --no-peers --repeat 3 --markdown --json "$OUT/lorenz_cuda.json" \
    2>&1 | tee "$OUT/lorenz_cuda.txt"
