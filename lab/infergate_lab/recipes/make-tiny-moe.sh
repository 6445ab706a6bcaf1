#!/bin/sh
# A tiny random-weight Qwen3-MoE (8 experts, top-2) with a locally trained byte-level BPE
# tokenizer (no hub is reachable), run inside the lab engine image, no network. Seeded, and
# trained on the image's own stdlib sources, so the same image makes the same files.
# $1: the output directory. The model cache key covers this text.
set -eu
python3 - "$@" <<'PY'
import glob
import sys
import sysconfig

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]


def corpus():
    for f in sorted(glob.glob(sysconfig.get_paths()["stdlib"] + "/*.py"))[:200]:
        with open(f, encoding="utf-8", errors="ignore") as fh:
            yield fh.read()


tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
trainer = trainers.BpeTrainer(
    vocab_size=4093, show_progress=False, special_tokens=special,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
)
tok.train_from_iterator(corpus(), trainer)
hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
hf.chat_template = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
config = AutoConfig.for_model(
    "qwen3_moe", vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
    head_dim=64, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
    tie_word_embeddings=True, eos_token_id=hf.eos_token_id, pad_token_id=hf.pad_token_id,
    moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2,
)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
model.save_pretrained(out)
hf.save_pretrained(out)
print(model.config.architectures, sum(p.numel() for p in model.parameters()), "parameters")
PY
# safetensors are written 0600: readable by whatever user an engine runs as on a node
chmod -R a+rX "$1"
