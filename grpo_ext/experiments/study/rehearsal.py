"""A tiny random model with a real model's tokenizer pipeline and chat template: the study's ``--quick`` rehearsal
(and the tests of the runners on a chat-format task) run every path of the real study on it in minutes, without
training the real model. Its numbers mean nothing; its plumbing is the real one (a byte-level BPE tokenizer with the
base's pre-tokenizer, special tokens and chat template, LoRA, the prompt lengths of the real task).

The rehearsal's tokenizer is the base's retrained on the task's own text to a few hundred tokens
(:func:`rehearsal_corpus`, ``vocab_size``): a 49k-token vocabulary makes every logit row, log-softmax and sampling
step of a 16-wide model 49k wide, which is nearly all of a rehearsal's time, and says nothing the real run does not.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["REHEARSAL_VOCAB", "TINY_SHAPE", "rehearsal_corpus", "tiny_model_like"]

#: The tiny model's shape: small enough that a step on the real task's ~200-token prompts takes well under a second.
TINY_SHAPE = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
#: The rehearsal tokenizer's vocabulary (the 256 bytes, the special tokens, the task's frequent words and merges).
REHEARSAL_VOCAB = 1024
#: The record of what a rehearsal model folder was built from (a folder built from anything else is rebuilt).
RECORD = "rehearsal.json"


def rehearsal_corpus(tasks, tokenizer=None, per_split: int = 64) -> list[str]:
    """The text a rehearsal tokenizer is trained on: the first ``per_split`` problems of each split of each of
    ``tasks`` (e.g. the study's task and its baselines' prompts), their prompts as the model reads them (rendered by
    ``tokenizer``'s chat template when given: its system prompt and role tokens too) and their reference solutions."""
    texts = []
    for task in tasks:
        for split in ("train", "validation", "test"):
            for row in task.load(split, per_split):
                prompt = row["prompt"]
                if isinstance(prompt, list) and tokenizer is not None and tokenizer.chat_template:
                    prompt = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
                elif isinstance(prompt, list):
                    prompt = "\n".join(m["content"] for m in prompt)
                texts.append(prompt)
                texts.append(str(row.get("solution") or row.get("answer") or ""))
    return texts


def _never_a_number(model, tokenizer) -> None:
    """Make a random model on a task-trained vocabulary as wrong as one on a real vocabulary. A task's text is mostly
    numbers, so a near-uniform draw over its tokens writes one in nearly every sample, and the lenient answer (the last
    number) of a few percent of them is right by chance: RFT and DPO would train or not by luck. Here every token
    holding a digit gets a zero output row (logit 0) and every other token a random row of std 1 (logits spread like
    N(0, 16) at the final norm's scale), so a digit is drawn about once in 10^5 tokens: the rehearsal's samples hold
    no number, its RFT and DPO find no correct sample (the study's no-training-data path), as the real-vocabulary
    rehearsal did. (Its samples are a random model's, peaked: text, never an answer.)"""
    import torch

    vocab = len(tokenizer)
    weight = model.get_output_embeddings().weight
    digits = torch.tensor([any(c.isdigit() for c in tokenizer.decode([i])) for i in range(vocab)], device=weight.device)
    with torch.no_grad():
        weight.normal_(0.0, 1.0)
        weight[digits[: weight.shape[0]]] = 0.0


def _record(source, tasks, vocab_size, seed) -> dict:
    """What a rehearsal model is built from: its tokenizer's source, the task text (unrendered) and the shape."""
    digest = hashlib.sha256("\x00".join(rehearsal_corpus(tasks)).encode()).hexdigest() if tasks else None
    return {
        "source": str(source),
        "vocab_size": vocab_size,
        "corpus_sha256": digest,
        "seed": seed,
        "shape": TINY_SHAPE,
        "output_layer": "untied, zero rows for digits" if tasks else "tied",
    }


def tiny_model_like(
    source: str | Path,
    out: str | Path,
    seed: int = 0,
    tasks: list | None = None,
    vocab_size: int = REHEARSAL_VOCAB,
) -> Path:
    """A random Llama of :data:`TINY_SHAPE` in ``out`` with ``source``'s tokenizer (a model name or folder, or a
    tokenizer's own folder; its chat template included), a plain safetensors folder any loader of the project takes.
    With ``tasks``, the tokenizer is ``source``'s retrained on their text (:func:`rehearsal_corpus`) to at most
    ``vocab_size`` tokens: the same pre-tokenizer, decoder, special tokens and chat template, a vocabulary a tiny
    model's logits can afford. Kept when ``out`` already holds one built from the same inputs (idempotent)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from grpo_ext.io import atomic_write_json
    from grpo_ext.model_paths import resolve_model_path

    out = Path(out)
    record = _record(source, tasks, vocab_size if tasks else None, seed)
    if (out / "model.safetensors").is_file() and (out / "tokenizer_config.json").is_file():
        kept = json.loads((out / RECORD).read_text()) if (out / RECORD).is_file() else None
        if kept == record or (kept is None and not tasks):
            return out
    folder = Path(str(source)).expanduser()  # a tokenizer's own folder, or a model's (a name resolved)
    is_tokenizer = folder.is_dir() and (folder / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(str(folder) if is_tokenizer else resolve_model_path(str(source)))
    if tasks:
        corpus = rehearsal_corpus(tasks, tokenizer)
        tokenizer = tokenizer.train_new_from_iterator([corpus], vocab_size=vocab_size)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,  # the 8-shot prompts of the real task are ~500 tokens
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=not tasks,  # retrained: an output layer of its own (below)
        **TINY_SHAPE,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    if tasks:
        _never_a_number(model, tokenizer)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    atomic_write_json(out / RECORD, record)
    return out
