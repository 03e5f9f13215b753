"""A tiny GGUF causal LM written with the `gguf` package's writer, in the layout of SmolLM2's file (llama
architecture, a byte-level BPE tokenizer, a chat template, tied embeddings, float32 tensors)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 16, 2, 2, 1, 32
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table (every byte one token)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tiny_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the file; returns its tensors by GGUF name (as written, float32)."""
    import gguf

    chars = _byte_chars()
    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = [*SPECIALS, *chars, "Ġt", "he", "Ġthe"]
    types = [gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS))
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-smollm")
    writer.add_block_count(LAYERS)
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    rng = np.random.default_rng(seed)
    head_dim = HIDDEN // HEADS

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    tensors = {"token_embd.weight": rand(vocab, HIDDEN), "output_norm.weight": 1 + rand(HIDDEN)}
    for i in range(LAYERS):
        tensors |= {
            f"blk.{i}.attn_norm.weight": 1 + rand(HIDDEN),
            f"blk.{i}.attn_q.weight": rand(HEADS * head_dim, HIDDEN),
            f"blk.{i}.attn_k.weight": rand(KV_HEADS * head_dim, HIDDEN),
            f"blk.{i}.attn_v.weight": rand(KV_HEADS * head_dim, HIDDEN),
            f"blk.{i}.attn_output.weight": rand(HIDDEN, HEADS * head_dim),
            f"blk.{i}.ffn_norm.weight": 1 + rand(HIDDEN),
            f"blk.{i}.ffn_gate.weight": rand(FFN, HIDDEN),
            f"blk.{i}.ffn_up.weight": rand(FFN, HIDDEN),
            f"blk.{i}.ffn_down.weight": rand(HIDDEN, FFN),
        }
    for name, value in tensors.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tensors
