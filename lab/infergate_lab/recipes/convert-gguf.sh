#!/bin/sh
# GGUF -> Hugging Face safetensors directory, run inside the lab engine image (its torch,
# transformers and gguf do the dequantizing and the tokenizer conversion), no network.
# $1: the .gguf file, $2: the output directory. The model cache key covers this text.
set -eu
python3 - "$@" <<'PY'
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

gguf, out = Path(sys.argv[1]), sys.argv[2]
tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
# dequantize: transformers 5 otherwise keeps the GGUF blocks packed, and cannot save those
unpacked = GgufConfig(dequantize=True)
model = AutoModelForCausalLM.from_pretrained(
    gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16, quantization_config=unpacked
)
model.save_pretrained(out)
tok.save_pretrained(out)
ids = tok("The capital of France is", return_tensors="pt")
print(repr(tok.decode(model.generate(**ids, max_new_tokens=8, do_sample=False)[0])))
print(model.config.architectures, sum(p.numel() for p in model.parameters()), "parameters")
PY
# safetensors are written 0600: readable by whatever user an engine runs as on a node
chmod -R a+rX "$2"
