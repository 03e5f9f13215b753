"""Stop strings (grpo_ext.sampler.stops): the cut against lm-eval 0.4.13's, the incremental check against lm-eval's
stopping criterion on a byte-level BPE tokenizer whose tokens are known by construction, every backend (the
continuous sampler, the `generate` fallback, vLLM's requests), the sample cache's key, and GRPO's sampler rollouts.

The sampler runs use the embedded model (a character tokenizer; its samples look like `48-5=43;#43`), so stop
strings like `;` (mid-sample), `;#` (two tokens) and `4` (often the first character) are hit at known places."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lm_eval.models.utils import postprocess_generated_text
from lm_eval.models.utils_hf import MultiTokenEOSCriteria
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
from transformers.generation.stopping_criteria import StopStringCriteria

from grpo_ext.errors import UserError
from grpo_ext.evaluation.backends import VLLMBackend
from grpo_ext.model_paths import resolve_model_path
from grpo_ext.rollouts import sample_completions, sampler_settings
from grpo_ext.sampler.continuous import continuous_sample
from grpo_ext.sampler.sampling import SamplingParams, derive_seed, encode_prompt_ids, sample
from grpo_ext.sampler.stops import StopChecker, cut_at_stop
from grpo_ext.tasks import get_task
from tests.device_strict import device_strict
from tests.gguf_fixture import _byte_chars
from tests.sampler.test_sampling_cache import FakeLLM, FakeSamplingParams
from tests.trainer_utils import tiny_args, tiny_trainer

# ---- the cut: hand-worked positions, and lm-eval's own function as the reference -------------------------------

CUTS = [
    # (text, stop strings, the text we keep: worked by hand)
    ("Question: what", ("Question:",), ""),  # at the very start: nothing is kept
    ("12\n\nQuestion: 3+4", ("Question:",), "12\n\n"),  # mid-text
    ("#### 7\nProblem: x\nQuestion: y", ("Question:", "Problem:"), "#### 7\n"),  # two: the first one in the text
    ("#### 7\nQuestion: x\nProblem: y", ("Problem:", "Question:"), "#### 7\n"),  # whatever the order of the list
    ("a Question:b Question:c", ("Question:",), "a "),  # twice: the first occurrence
    ("#### 7", ("Question:",), "#### 7"),  # none occurs
    ("#### 7", (), "#### 7"),  # no stop strings
    ("Questio", ("Question:",), "Questio"),  # a prefix of a stop string is not a stop string
]


@pytest.mark.parametrize("text, stop, kept", CUTS)
def test_the_cut_is_where_lm_eval_cuts(text, stop, kept):
    assert cut_at_stop(text, stop) == kept
    assert postprocess_generated_text(text, list(stop), None) == kept  # lm-eval 0.4.13's cut of `until`


def test_overlapping_stop_strings_cut_where_the_first_one_completes_whatever_their_order():
    """Where two occurrences overlap, lm-eval's cut depends on the order of `until`; ours is the stop string completed
    first, the only rule under which the text of a sample stopped early is cut where its whole text is cut."""
    text, stop = "xabcd-rest", ("abcd", "bc")  # "bc" is complete at "xabc", "abcd" one character later
    assert postprocess_generated_text(text, ["abcd", "bc"], None) == "x"
    assert postprocess_generated_text(text, ["bc", "abcd"], None) == "xa"
    assert cut_at_stop(text, stop) == cut_at_stop(text, stop[::-1]) == "xa"
    stopped = text[: text.index("bc") + 2]  # what a sampler that stops at the first stop string has written
    assert cut_at_stop(stopped, stop) == cut_at_stop(text, stop)
    # completed at the same character: the longer one (it starts first)
    assert cut_at_stop("x:ab", ("b", "ab")) == cut_at_stop("x:ab", ("ab", "b")) == "x:"


# ---- the incremental check on a byte-level BPE tokenizer with multi-character tokens ---------------------------


@pytest.fixture(scope="module")
def bpe():
    """GPT-2-style byte-level BPE whose merges make `Question` and `ĠHow` single tokens, so the text
    " 12\\n\\nQuestion: How" is the tokens ['Ġ', '1', '2', 'Ċ', 'Ċ', 'Question', ':', 'ĠHow'] (by construction)."""
    merges = [(word[:i], word[i]) for word in ("Question", "ĠHow") for i in range(1, len(word))]
    specials = ["<|endoftext|>", "<|im_end|>"]
    vocab = {token: i for i, token in enumerate([*specials, *_byte_chars(), *(a + b for a, b in merges)])}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|im_end|>")


def test_the_tokenizer_has_the_tokens_the_cases_rely_on(bpe):
    ids = bpe(" 12\n\nQuestion: How", add_special_tokens=False)["input_ids"]
    assert bpe.convert_ids_to_tokens(ids) == ["Ġ", "1", "2", "Ċ", "Ċ", "Question", ":", "ĠHow"]


# (stop string, index of the token that completes it in " 12\n\nQuestion: How": worked by hand)
CHECKS = [
    ("Question:", 6),  # two whole tokens: complete at ':'
    ("n: H", 7),  # the end of 'Question', ':', the start of 'ĠHow': mid-token at both ends
    ("uest", 5),  # inside one token
    ("\n\nQ", 5),  # two whole tokens and the first character of a third
    (" 1", 1),  # at the very start of the sample
    ("Answer", None),  # never
]


@pytest.mark.parametrize("stop, at", CHECKS)
def test_the_check_fires_at_the_token_lm_eval_stops_at(bpe, stop, at):
    ids = bpe(" 12\n\nQuestion: How", add_special_tokens=False)["input_ids"]
    checker = StopChecker(bpe, [stop])
    ours = next((k for k in range(len(ids)) if checker(ids[: k + 1])), None)
    lm_eval = MultiTokenEOSCriteria(stop, bpe, initial_decoder_input_length=0, batch_size=1)
    theirs = next((k for k in range(len(ids)) if lm_eval(torch.tensor([ids[: k + 1]]), None)), None)
    assert ours == theirs == at
    if at is not None:  # the stopped text, cut, is the whole text cut by lm-eval
        stopped = bpe.decode(ids[: at + 1], skip_special_tokens=True)
        assert cut_at_stop(stopped, [stop]) == postprocess_generated_text(" 12\n\nQuestion: How", [stop], None)


def test_the_check_decodes_only_the_tail_and_skips_special_tokens(bpe, monkeypatch):
    checker = StopChecker(bpe, ["Question:", "ab"])
    assert checker.window == len("Question:") + 1  # bytes of the longest stop string, and one more token
    long = bpe("x" * 500 + " Question:", add_special_tokens=False)["input_ids"]
    decoded = []
    original = bpe.decode
    monkeypatch.setattr(bpe, "decode", lambda ids, **kw: decoded.append(len(ids)) or original(ids, **kw))
    assert checker(long) and decoded == [checker.window]
    end = bpe.convert_tokens_to_ids("<|im_end|>")
    # special tokens decode to nothing: the window reaches past them to as many text tokens
    with_specials = long[:-2] + [end, end] + long[-2:]
    assert checker(with_specials) and decoded[-1] == checker.window + 2
    assert not checker([]) and not checker(bpe("x Questio", add_special_tokens=False)["input_ids"])
    with pytest.raises(ValueError, match="at least one stop string"):
        StopChecker(bpe, [])


def test_transformers_stop_strings_read_the_prompt_and_ours_do_not(bpe):
    """Why transformers' `stop_strings` is not used: its criterion reads prompt + new tokens, so a stop string that
    begins in the prompt ends the sample at its first token; lm-eval's criterion and ours read the new tokens only.
    (It also fails to build on the embedded model's character tokenizer.)"""
    prompt = bpe(" 12\n\nQuestion:", add_special_tokens=False)["input_ids"]
    new = bpe(" How", add_special_tokens=False)["input_ids"]
    assert StopStringCriteria(bpe, ["n: H"])(torch.tensor([prompt + new]), None).item()
    assert not StopChecker(bpe, ["n: H"])(new)
    lm_eval = MultiTokenEOSCriteria("n: H", bpe, initial_decoder_input_length=len(prompt), batch_size=1)
    assert not lm_eval(torch.tensor([prompt + new]), None)


# ---- SamplingParams and the sample cache's key -------------------------------------------------------------------


def test_sampling_params_validate_stop_and_key_it_only_when_set():
    base = SamplingParams(n=2, temperature=0.7, max_new_tokens=64, seed=3)
    # the key of every cache line and committed report written before stop strings existed: unchanged
    assert base.key() == "temperature=0.7,top_p=1.0,max_new_tokens=64,seed=3"
    assert base.replace(stop=()).key() == base.key() and base.stop == ()
    one = base.replace(stop=["Question:"])
    assert one.stop == ("Question:",) and hash(one)  # a list is kept as a tuple: still hashable
    assert one.key() == base.key() + ',stop=["Question:"]'
    assert base.replace(stop="Question:").stop == ("Question:",)  # one string is one stop string
    # the cut does not depend on the order or repeats of the stop strings: neither does the key
    assert base.replace(stop=("b", "a", "b")).key() == base.replace(stop=("a", "b")).key() != base.key()
    assert base.replace(stop=("\n\n",)).key() != base.replace(stop=("\n",)).key()
    for bad in ("", ("ok", ""), (3,)):
        with pytest.raises(ValueError, match="SamplingParams.stop must"):
            base.replace(stop=bad)
    assert SamplingParams(**base.replace(stop=("Q:",)).to_dict()).stop == ("Q:",)  # round trip through a dict


# ---- the sampler: the continuous engine and the generate fallback ------------------------------------------------


@pytest.fixture(scope="module")
def embedded():
    path = resolve_model_path("embedded")
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


PROMPTS = list(get_task("arithmetic").load("test", 6)["prompt"])
HOT = SamplingParams(n=4, temperature=1.3, max_new_tokens=24, seed=1, batch_size=2)


@pytest.mark.parametrize("stop", [(";",), (";#",), ("=", ";#"), ("4",), ("5;", "9")])
@pytest.mark.parametrize("continuous", [None, False])
def test_samples_with_stop_strings_are_the_samples_without_them_cut(embedded, stop, continuous):
    model, tok = embedded
    free = sample(model, tok, PROMPTS, HOT, progress=False, continuous=continuous)
    stopped = sample(model, tok, PROMPTS, HOT.replace(stop=stop), progress=False, continuous=continuous)
    assert stopped == [[cut_at_stop(text, stop) for text in texts] for texts in free]
    flat = [text for texts in free for text in texts]
    assert sum(any(s in t for s in stop) for t in flat) >= 4  # the stop strings were hit: not vacuous


def test_a_stop_string_that_begins_in_the_prompt_does_not_stop_the_sample(embedded):
    """The prompt ends with '=' and its samples start with '4': '=4' is in prompt + sample, not in the sample's
    start. lm-eval and vLLM read the new text only, and so do we (transformers' stop_strings reads the prompt too)."""
    model, tok = embedded
    prompts = [p for p in PROMPTS if p.startswith("4")][:1]
    free = sample(model, tok, prompts, HOT, progress=False)
    assert prompts and all(t.startswith("4") for t in free[0])  # each sample's first character completes '=4'
    stopped = sample(model, tok, prompts, HOT.replace(stop=("=4",)), progress=False)
    assert stopped == [[cut_at_stop(t, ("=4",)) for t in free[0]]] and all(stopped[0])  # none cut at its start


def test_the_engine_ends_the_sample_at_the_token_that_completes_it_and_frees_its_slot(embedded):
    """One slot, one sample a prompt: every decode step is one token of one sample, so the steps count the tokens the
    stopped samples still cost; each stopped sample is the free one's tokens up to the completing one."""
    model, tok = embedded
    prompt_ids = encode_prompt_ids(tok, PROMPTS)
    seeds = [[derive_seed(7, j)] for j in range(len(PROMPTS))]
    steps = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: steps.append(kwargs["input_ids"].shape), with_kwargs=True
    )

    def run(stop):
        steps.clear()
        kwargs = dict(max_new_tokens=24, temperature=1.3, top_p=1.0, slots=1, prefill_batch=1, pad_id=0)
        out = dict(continuous_sample(model, prompt_ids, seeds, eos_ids=[tok.eos_token_id], stop=stop, **kwargs))
        decode_steps = sum(shape[1] == 1 for shape in steps)  # prefills take the whole prompt
        return [out[j][0] for j in range(len(PROMPTS))], decode_steps

    try:
        free, free_steps = run(None)
        checker = StopChecker(tok, [";"])
        stopped, stopped_steps = run(checker)
    finally:
        hook.remove()
    for whole, ids in zip(free, stopped, strict=True):
        first = next((k for k in range(len(whole)) if checker(whole[: k + 1])), len(whole) - 1)
        assert ids == whole[: first + 1]
        assert tok.decode(ids).endswith(";") or ids == whole  # kept up to and including the completing token
    # the first token comes from the prefill; each further token of a sample is one decode step of the one slot
    assert free_steps == sum(len(ids) - 1 for ids in free)
    assert stopped_steps == sum(len(ids) - 1 for ids in stopped) < free_steps


# ---- vLLM --------------------------------------------------------------------------------------------------------


def test_vllm_requests_carry_stop_only_when_set_and_texts_are_cut():
    llm = FakeLLM()
    backend = VLLMBackend(llm=llm, sampling_params_cls=FakeSamplingParams, name="fake-vllm")
    params = SamplingParams(n=2, temperature=0.7, max_new_tokens=20, seed=1)
    assert "stop" not in backend.requests(["a="], params)[0].kwargs  # the request vLLM always got
    request = backend.requests(["a="], params.replace(stop=("Question:", "|1")))[0].kwargs
    assert request["stop"] == ["Question:", "|1"] and "include_stop_str_in_output" not in request  # vLLM: off
    # the fake engine ignores `stop` ("a=|0", "a=|1"): the backend's contract holds anyway
    assert backend.generate(["a="], params.replace(stop=("|1",))) == [["a=|0", "a="]]


# ---- GRPO: generation_backend sampler ----------------------------------------------------------------------------

TRL_KWARGS = dict(max_new_tokens=24, do_sample=True, temperature=1.3, top_p=1.0, top_k=0, min_p=None)


def test_rollouts_keep_ids_up_to_the_completing_token_and_match_the_harness(embedded):
    model, tok = embedded
    rows = [p for p in PROMPTS[:3] for _ in range(4)]
    prompt_ids = encode_prompt_ids(tok, rows)
    free = sample_completions(model, prompt_ids, rows, 5, sampler_settings(TRL_KWARGS, "eager", [1], 0))
    settings = sampler_settings(TRL_KWARGS, "eager", [1], 0, stop_strings=[";#"], tokenizer=tok)
    stopped = sample_completions(model, prompt_ids, rows, 5, settings)
    checker = StopChecker(tok, [";#"])
    hits = 0
    for whole, ids in zip(free, stopped, strict=True):
        first = next((k for k in range(len(whole)) if checker(whole[: k + 1])), None)
        assert ids == (whole if first is None else whole[: first + 1])  # no EOS appended after the stop string
        hits += first is not None
    assert hits >= 4
    # the harness's texts with the same seed are these completions, cut
    harness = sample(model, tok, PROMPTS[:3], HOT.replace(seed=5, max_new_tokens=24, stop=(";#",)), progress=False)
    texts = [cut_at_stop(t, (";#",)) for t in tok.batch_decode(stopped, skip_special_tokens=True)]
    assert texts == [t for group in harness for t in group]


def test_stop_strings_config_field_defaults_to_trl_and_refuses_what_cannot_honour_it(tmp_path):
    assert tiny_args(tmp_path=tmp_path).stop_strings is None
    args = tiny_args(tmp_path=tmp_path, generation_backend="sampler", stop_strings=[";#"])
    assert args.stop_strings == [";#"]
    assert tiny_args(tmp_path=tmp_path, generation_backend="sampler", stop_strings=";#").stop_strings == [";#"]
    with pytest.raises(UserError, match="stop_strings: honoured by generation_backend `sampler` only"):
        tiny_args(tmp_path=tmp_path, stop_strings=[";#"])
    with pytest.raises(UserError, match="stop_strings: must hold non-empty strings"):
        tiny_args(tmp_path=tmp_path, generation_backend="sampler", stop_strings=[";", ""])
    with pytest.raises(UserError, match="stop_strings: .*mask_truncated_completions"):
        tiny_args(tmp_path=tmp_path, generation_backend="sampler", stop_strings=[";"], mask_truncated_completions=True)
    for backend in ("trl", "sampler"):
        with pytest.raises(UserError, match="generation_kwargs: stop_strings cannot go here"):
            tiny_args(tmp_path=tmp_path, generation_backend=backend, generation_kwargs={"stop_strings": [";"]})
    trainer = tiny_trainer(args=tiny_args(tmp_path=tmp_path))
    trainer.args.stop_strings = [";"]  # changed after the config's checks: the trainer's own check names it
    from grpo_ext.rollouts import sampler_settings_of

    with pytest.raises(UserError, match="stop_strings: honoured by generation_backend `sampler` only"):
        sampler_settings_of(trainer)


def test_a_grpo_step_with_stop_strings_trains_device_strict_and_completions_end_at_the_stop(tmp_path):
    args = tiny_args(tmp_path=tmp_path, max_steps=1, generation_backend="sampler", stop_strings=[";"], temperature=1.3)
    trainer = tiny_trainer(args=args)
    tok, data = trainer.processing_class, trainer.train_dataset
    trainer.model.train()
    out = trainer._generate_and_score_completions([data[i] for i in (0, 1) for _ in range(4)])
    ids = [row[mask.bool()].tolist() for row, mask in zip(out["completion_ids"], out["completion_mask"], strict=True)]
    texts = tok.batch_decode(ids, skip_special_tokens=True)
    # every completion of this model writes a ';' well within 24 tokens: each ends right after its first one
    assert all(
        t.endswith(";") and t.count(";") == 1 and row[-1] != tok.eos_token_id for t, row in zip(texts, ids, strict=True)
    )
    with device_strict():
        trainer.train()
    assert trainer.state.global_step == 1
    assert np.isfinite([h["loss"] for h in trainer.state.log_history if "loss" in h]).all()
