#!/usr/bin/env bash
# Build llama.cpp's own `llama-server` from the llama.cpp sources vendored in the
# llama-cpp-python sdist (PyPI), with cmake; about 10 minutes on 2 cores.
#
#   bash benchmarks/compat/llamacpp_build.sh [WORKDIR]      (default: ~/.cache/loadgen-compat)
#
# Prints the path of the built binary on its last line. Not run by CI.
set -euo pipefail
work="${1:-$HOME/.cache/loadgen-compat}"
mkdir -p "$work"
cd "$work"
if [ ! -x build/bin/llama-server ]; then
    sdist=$(ls llama_cpp_python-*.tar.gz 2>/dev/null | head -1 || true)
    if [ -z "$sdist" ]; then
        python3 -m pip download -q --no-deps --no-binary :all: llama-cpp-python -d .
        sdist=$(ls llama_cpp_python-*.tar.gz | head -1)
    fi
    src="${sdist%.tar.gz}"
    [ -d "$src" ] || tar xzf "$sdist"
    # the compiler's warnings go to build.log; a failure prints its tail. AVX2, not
    # -march=native: a VM whose CPUID shows AMX and AVX-512 compiled a server that died
    # with "Illegal instruction" at its first matrix product
    cmake -S "$src/vendor/llama.cpp" -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
        -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >build.log 2>&1 \
        && cmake --build build --target llama-server -j "$(nproc)" >>build.log 2>&1 \
        || { tail -20 build.log >&2; exit 1; }
fi
echo "$work/build/bin/llama-server"
