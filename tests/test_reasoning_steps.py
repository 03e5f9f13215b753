"""grpo_ext.reasoning_steps: step rules on hand-worked texts, and the step-end token mapping against the brute-force
reference (decode every prefix: the implementation before it became linear) on BPE, SentencePiece-like, WordPiece
and character tokenizers, canonical and non-canonical token sequences."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from grpo_ext.char_tokenizer import CHARACTERS, build_char_tokenizer
from grpo_ext.reasoning_steps import (
    DECODE_CONTEXT,
    STEP_RULES,
    _char_ends_of_tokens,
    char_ends_by_incremental_decoding,
    char_ends_by_prefix_decoding,
    join_steps,
    step_end_token_indices,
    step_instruction,
    step_spans,
    step_texts,
)

FIXTURES = Path(__file__).parent / "fixtures"


# ---- rules on hand-worked texts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("separator", "text", "spans", "texts"),
    [
        # literal separators: unchanged behaviour (empty steps between consecutive separators, no stripping)
        (";", "1+2=3;;#3;", [(0, 6), (6, 7), (7, 10)], ["1+2=3", "", "#3"]),
        ("\n", "a\n\nb", [(0, 2), (2, 3), (3, 4)], ["a", "", "b"]),
        # newline: a run of line breaks (with whitespace-only lines) is one break
        ("newline", " a\nb\n\n \t\nc", [(0, 3), (3, 9), (9, 10)], ["a", "b", "c"]),
        # blank_line: paragraphs; single breaks stay inside a step
        ("blank_line", "a\nb\n\nc\n \n\nd", [(0, 5), (5, 10), (10, 11)], ["a\nb", "c", "d"]),
        # step_k: a preamble is a step; a marker inside a line does not split; indentation goes to the next step
        (
            "step_k",
            "Plan.\nStep 1: x\ny\nStep 2: z, as in Step 1: here\n\n  Step 10: w",
            [(0, 6), (6, 18), (18, 49), (49, 61)],
            ["Plan.", "Step 1: x\ny", "Step 2: z, as in Step 1: here", "Step 10: w"],
        ),
        # no separator: one step; truncated text: the unfinished last step is a step
        ("newline", "no separator here", [(0, 17)], ["no separator here"]),
        ("step_k", "Step 1: a\nStep 2: trunc", [(0, 10), (10, 23)], ["Step 1: a", "Step 2: trunc"]),
        # whitespace-only pieces join their neighbour; whitespace-only text has no steps under a named rule
        ("newline", "  \nabc\n", [(0, 7)], ["abc"]),
        ("newline", "abc\n   ", [(0, 7)], ["abc"]),
        ("newline", " \n \n", [], []),
        ("\n", " ", [(0, 1)], [" "]),
        # empty text and a trailing separator open no step
        ("newline", "", [], []),
        (";", "a;", [(0, 2)], ["a"]),
    ],
)
def test_step_rules_on_hand_worked_texts(separator, text, spans, texts):
    assert step_spans(text, separator) == spans
    assert step_texts(text, separator) == texts
    assert all(text[s:e] for s, e in spans) and (not spans or spans[-1][1] == len(text))
    assert [s for s, _ in spans[1:]] == [e for _, e in spans[:-1]]  # spans tile the text


@pytest.mark.parametrize("separator", [*STEP_RULES, ";", "\n"])
def test_join_steps_round_trips(separator):
    steps = ["Half of 48 is 24.", "24 + 48 = 72.", "#### 72"]
    text = join_steps(steps, separator)
    expected = [f"Step {k}: {s}" for k, s in enumerate(steps, 1)] if separator == "step_k" else steps
    assert step_texts(text, separator) == expected
    assert "step" in step_instruction(separator)


def test_empty_separator_is_an_error():
    with pytest.raises(ValueError, match="step_separator must be a non-empty string.*newline, blank_line, step_k"):
        step_spans("a", "")


# ---- step ends on tokens -------------------------------------------------------------------------------------


def line_char_tokenizer(characters: str, tags: tuple[str, ...] = (), bos: str | None = None) -> PreTrainedTokenizerFast:
    """One token per character, line breaks included (the embedded tokenizer has none), plus `tags` as whole tokens
    and an optional BOS added in front of every encoding (as Mistral's tokenizer does)."""
    from tokenizers import processors

    specials = ["<pad>", "<eos>", "<unk>", *([bos] if bos else [])]
    vocab = {tok: i for i, tok in enumerate([*specials, *dict.fromkeys(characters)])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", bos_token=bos
    )
    tokenizer.add_tokens(list(tags))
    return tokenizer


def test_step_ends_on_char_tokens_truncated_and_with_eos():
    tok = line_char_tokenizer(CHARACTERS + "\nStep:abc")
    text = "Step 1: 1+2=3\n\nStep 2: 3+4"  # cut before its end (max_completion_length)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert step_end_token_indices(tok, ids, "step_k") == [text.index("\n\n") + 1, len(ids) - 1]
    assert step_end_token_indices(tok, ids, "newline") == [text.index("\n\n") + 1, len(ids) - 1]
    assert step_end_token_indices(tok, ids, ";") == [len(ids) - 1]  # no separator: one step, ends at the end
    # EOS (special) keeps its position but holds no step
    assert step_end_token_indices(tok, [*ids, tok.eos_token_id], "step_k") == [text.index("\n\n") + 1, len(ids) - 1]
    assert step_end_token_indices(tok, [tok.eos_token_id], "newline") == []


def _training_text() -> list[str]:
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k_sample.jsonl").read_text().splitlines()]
    rows += [json.loads(line) for line in (FIXTURES / "math_sample.jsonl").read_text().splitlines()]
    texts = [" ".join(str(v) for v in row.values()) for row in rows]
    return texts + ["Привет мир ки. 中文 测试 😀 émigré naïve don't I'm Step 1: 3 + 4 = 7.\n\n"] * 4


def byte_level_bpe() -> PreTrainedTokenizerFast:
    """GPT-2/Qwen-style: byte-level BPE (multi-byte characters split over tokens)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(_training_text(), trainers.BpeTrainer(vocab_size=500, initial_alphabet=alphabet))
    tok.add_special_tokens(["<eos>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


def sentencepiece_like() -> PreTrainedTokenizerFast:
    """Llama/Mistral-style: metaspace BPE with byte fallback (bytes are ordinary vocabulary) and a decoder that
    strips the leading space."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.train_from_iterator(_training_text(), trainers.BpeTrainer(vocab_size=400))
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    spec["model"].update(byte_fallback=True, unk_token=None)
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens(["</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>")


def wordpiece_with_cleanup() -> PreTrainedTokenizerFast:
    """BERT-style: WordPiece, `##` continuations, and transformers' clean-up of spaces before punctuation."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(_training_text(), trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", clean_up_tokenization_spaces=True)


TOKENIZERS = {
    "byte_level_bpe": byte_level_bpe,
    "sentencepiece_like": sentencepiece_like,
    "wordpiece_with_cleanup": wordpiece_with_cleanup,
    "char": build_char_tokenizer,
}


def reference_step_end_token_indices(tokenizer, token_ids, separator):
    """The implementation before the linear mapping: offsets when canonical, else decode every prefix."""
    special = set(tokenizer.all_special_ids)
    positions = [i for i, t in enumerate(token_ids) if t not in special]
    content_ids = [token_ids[i] for i in positions]
    text = tokenizer.decode(content_ids, skip_special_tokens=True)
    spans = step_spans(text, separator)
    if not spans:
        return []
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(encoding["input_ids"]) == list(content_ids):
        ends = [end for _, end in encoding["offset_mapping"]]
    else:
        ends = char_ends_by_prefix_decoding(tokenizer, content_ids)
    indices, token = [], 0
    for _, span_end in spans:
        while token < len(ends) - 1 and ends[token] < span_end:
            token += 1
        indices.append(positions[token])
    return indices


def _sequences(tokenizer, rng: random.Random) -> list[list[int]]:
    """Canonical encodings, character-by-character encodings (non-canonical), and random ids."""
    texts = ["Step 1: 3 + 4 = 7.\nStep 2: 7 * 2 = 14.\n\n#### 14", "Привет ки\n\n中文 😀 don't;  x\n \ny", "1+2=3;#3"]
    out = []
    for text in texts:
        out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        out.append([i for ch in text for i in tokenizer(ch, add_special_tokens=False)["input_ids"]])
    vocab = len(tokenizer)
    out += [[rng.randrange(vocab) for _ in range(rng.randrange(1, 48))] for _ in range(120)]
    return out


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_linear_mapping_equals_the_prefix_decoding_reference(name):
    tokenizer = TOKENIZERS[name]()
    rng = random.Random(0)
    special = set(tokenizer.all_special_ids)
    for ids in _sequences(tokenizer, rng):
        content = [i for i in ids if i not in special]
        if content:
            assert char_ends_by_incremental_decoding(tokenizer, content) == char_ends_by_prefix_decoding(
                tokenizer, content
            ), (name, content)
        for separator in ("newline", "blank_line", "step_k", ";", "\n", " "):
            assert step_end_token_indices(tokenizer, ids, separator) == reference_step_end_token_indices(
                tokenizer, ids, separator
            ), (name, separator, ids)


class _NonLocalDecoder:
    """A tokenizer whose decoding is not local (the text of n tokens is n * n characters): the incremental sum
    cannot add up, so the mapping must fall back to decoding every prefix."""

    all_special_ids: list[int] = []

    def decode(self, ids, skip_special_tokens=True):
        return "x" * len(ids) ** 2

    def batch_decode(self, sequences, skip_special_tokens=True):
        return [self.decode(s) for s in sequences]

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=True):
        return {"input_ids": [], "offset_mapping": []}  # never the canonical ids


def test_mapping_falls_back_to_prefix_decoding_when_decoding_is_not_local():
    tokenizer, ids = _NonLocalDecoder(), list(range(25))
    text = tokenizer.decode(ids)
    assert char_ends_by_incremental_decoding(tokenizer, ids)[-1] != len(text)  # the sum does not add up here
    assert _char_ends_of_tokens(tokenizer, ids, text) == char_ends_by_prefix_decoding(tokenizer, ids)


def test_mapping_decodes_a_linear_number_of_tokens():
    """Issue 19: the prefix decoding reads n(n+1)/2 tokens for n generated tokens; the mapping now reads
    O(n * DECODE_CONTEXT)."""
    tokenizer = byte_level_bpe()
    text = " ".join(_training_text())
    ids = [i for ch in text[:900] for i in tokenizer(ch, add_special_tokens=False)["input_ids"]][:816]
    decoded = []

    class Counting:
        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def __call__(self, *args, **kwargs):
            return tokenizer(*args, **kwargs)

        def decode(self, ids, **kwargs):
            decoded.append(len(ids))
            return tokenizer.decode(ids, **kwargs)

        def batch_decode(self, sequences, **kwargs):
            decoded.extend(len(s) for s in sequences)
            return tokenizer.batch_decode(sequences, **kwargs)

    ends = step_end_token_indices(Counting(), ids, "newline")
    assert ends == reference_step_end_token_indices(tokenizer, ids, "newline") and len(ends) > 3
    n = len(ids)
    assert sum(decoded) <= n + 2 * n * (DECODE_CONTEXT + 1)  # the full text once, then two short windows a token
    assert sum(decoded) < n * (n + 1) / 2 / 20
