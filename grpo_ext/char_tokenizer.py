"""A character-level tokenizer for the embedded model, built with `tokenizers`.

Saved as an ordinary `PreTrainedTokenizerFast` folder, so TRL, lm-eval and transformers load it with
`AutoTokenizer.from_pretrained` like any hub tokenizer. No BOS is added: SFT and RL then see the same format.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")
# Digits, the operators, '=' and the step/answer markers; space so that free text degrades to <unk> gently.
CHARACTERS = "0123456789+-*=;# "


def build_char_tokenizer(characters: str = CHARACTERS, model_max_length: int = 128) -> PreTrainedTokenizerFast:
    """One token per character; unknown characters map to <unk>."""
    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *characters))}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Every character is its own pre-token, with exact character offsets (reasoning_steps.py relies on them).
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        model_max_length=model_max_length,
        padding_side="left",
    )
