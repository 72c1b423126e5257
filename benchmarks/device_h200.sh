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
    tests/test_glsl_equivalence.py tests/test_examples.py tests/test_kernel_cache.py \
    tests/test_generated_programs.py 2>&1 | tail -25 | tee "$OUT/tests.txt"

# 2. the Lorenz sweep: GLSL, hand GLSL and the numpy reference at 1M; the GLSL columns up to 8M
timeout 150 python3 -m benchmarks lorenz --n 1048576 --columns GLSL,ref --no-peers \
    --repeat 1 --markdown --json "$OUT/lorenz_1m.json" 2>&1 | tee "$OUT/lorenz_1m.txt"
timeout 150 python3 -m benchmarks lorenz --n 2097152,4194304,8388608 --columns GLSL --no-peers \
    --repeat 3 --markdown --json "$OUT/lorenz_8m.json" 2>&1 | tee "$OUT/lorenz_8m.txt"
