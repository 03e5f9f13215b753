"""Random-weight stand-ins of real models, built locally (nothing is downloaded): what the GPU benchmarks
(``benchmarks/``) and the GPU smoke check (``scripts/gpu_check.py``) train and score on. Speed and memory depend on the
shapes, not on the weights.

- policies: Qwen2-architecture models with Qwen2.5-0.5B / -1.5B's published shapes (``SHAPES``) and the real vocabulary
  (151,936), random weights (seed 0), saved as safetensors with the embedded model's character tokenizer (its decode
  skips ids it does not know, so any sampled id decodes); ``tiny`` (hidden 64, vocabulary 1,000) rehearses the code
  paths on the CPU;
- process reward models: one small random-weight folder per PRM format (``build_prm``).

A child process that builds or measures one prints its JSON result on a line starting with ``RESULT_MARK``.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

__all__ = [
    "CHAT_TEMPLATE",
    "POLICY_SHAPE",
    "RESULT_MARK",
    "SHAPES",
    "build_prm",
    "build_random_model",
    "char_tokenizer",
]

RESULT_MARK = "@@RESULT@@"
SHAPES = {  # Qwen2.5 config.json values that determine the weights
    "0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
    ),
    "1.5b": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
    ),
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        tie_word_embeddings=True,
    ),  # smoke tests of this script
}
# A minimal chat template (Qwen's layout) so that conversational prompts render with the character tokenizer.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


CHARS = string.ascii_letters + string.digits + " \n+-*=;#?:.,$'\\{}|_<>/"
QWEN_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
POLICY_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 512,
}


def build_random_model(shape: str, folder: str | Path, *, dtype: str = "bfloat16", device: str = "cpu") -> Path:
    """Save a random-weight Qwen2 model of ``shape`` (a key of ``SHAPES``) with the embedded character tokenizer
    (plus a chat template) into ``folder``; returns the folder. ``device`` is where the weights are initialised
    (``cuda``: seconds for 1.5 B parameters instead of a minute on one CPU thread); the file is the same."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR

    folder = Path(folder)
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL_DIR)
    tokenizer.model_max_length = 32768  # prompts of real tasks are longer than the embedded task's 128 characters
    tokenizer.chat_template = CHAT_TEMPLATE
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id, "bos_token_id": None}
    config = Qwen2Config(**SHAPES[shape], **ids)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return folder


def char_tokenizer(tags: tuple[str, ...] = (), special: tuple[str, ...] = ()):
    """One token per character (line breaks included) plus whole-token tags."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<unk>", *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    out = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    out.add_tokens(list(tags))
    out.add_special_tokens({"additional_special_tokens": list(special)})
    return out


def build_prm(fmt: str, folder: Path) -> Path:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForTokenClassification, Qwen2Config, Qwen2Model

    if fmt not in ("token_classification", "step_tag", "qwen_prm"):  # the architectures this benchmark can build
        raise ValueError(f"benchmarks.prm_scoring: no random-weight {fmt!r} PRM to build; add its folder here")
    torch.manual_seed(0)
    if fmt == "qwen_prm":
        tok = char_tokenizer(special=("<|im_start|>", "<|im_end|>", "<extra_0>"))
        tok.chat_template = QWEN_TEMPLATE
        config = Qwen2Config(vocab_size=len(tok), pad_token_id=tok.pad_token_id, **POLICY_SHAPE)
        tensors = {f"model.{k}": v.contiguous() for k, v in Qwen2Model(config).state_dict().items()}
        h = config.hidden_size
        tensors |= {
            "score.0.weight": torch.randn(h, h) / h**0.5,
            "score.0.bias": torch.zeros(h),
            "score.2.weight": torch.randn(2, h) / h**0.5,
            "score.2.bias": torch.zeros(2),
        }
        folder.mkdir(parents=True)
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        spec = config.to_dict() | {"architectures": ["Qwen2ForProcessRewardModel"]}
        (folder / "config.json").write_text(json.dumps(spec))
    else:
        tok = char_tokenizer(tags=("ки",) if fmt == "step_tag" else ())
        config = LlamaConfig(
            vocab_size=len(tok), pad_token_id=tok.pad_token_id, tie_word_embeddings=True, num_labels=2, **POLICY_SHAPE
        )
        model_cls = LlamaForCausalLM if fmt == "step_tag" else LlamaForTokenClassification
        model_cls(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
