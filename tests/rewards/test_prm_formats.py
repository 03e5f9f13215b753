"""grpo_ext.rewards.prm.load_process_reward_model: tiny random PRMs in each format, built here (config, a tokenizer
that holds the tag tokens, safetensors weights), scored against a hand-written forward pass at the tag positions;
format detection; errors that name the token or the file; 4-bit; the config entry point; a GRPO step."""

from __future__ import annotations

import json
import string
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import (
    LlamaConfig,
    LlamaForTokenClassification,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2Model,
)

from grpo_ext.config import GRPOExtConfig
from grpo_ext.rewards.prm import (
    ProcessRewardModel,
    detect_prm_format,
    load_process_reward_model,
    process_reward_model_from_config,
)
from grpo_ext.rewards.prm_formats import QWEN_PRM_SYSTEM_PROMPT, QwenPRM, StepTagPRM
from tests.test_reasoning_steps import line_char_tokenizer

CHARS = string.ascii_letters + string.digits + " \n+-*=;#?:.,$'\\{}|_<>/"
QUESTION = "What is 2+3 then times 4?"
PROMPT = f"Solve it. Think step by step.\n\nQuestion: {QUESTION}\nAnswer:"  # the policy's prompt, not the PRM's
STEPS = ["Step 1: 2+3=5", "Step 2: 5*4=20", "Step 3: The answer is 20"]
HIDDEN = 64  # bitsandbytes' CPU 4-bit kernels need input features >= its block size (64)
QWEN_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


def _small(config_cls, tokenizer, **extra):
    return config_cls(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **extra,
    )


def make_step_tag_prm(path, step_tag: str = "ки"):
    """A Mistral causal LM (Math-Shepherd's architecture) with a BOS-adding tokenizer that holds the tag."""
    tokenizer = line_char_tokenizer(CHARS, tags=(step_tag,), bos="<s>")
    torch.manual_seed(0)
    model = MistralForCausalLM(_small(MistralConfig, tokenizer, bos_token_id=tokenizer.bos_token_id))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_qwen_prm(path, head=("score.0", "score.2"), chat_template=True, tag=True):
    """A Qwen2 body under `model.` and the hub's two-layer head, saved as the hub checkpoint is (its remote-code
    class and auto_map in config.json; the remote files themselves absent)."""
    tokenizer = line_char_tokenizer(CHARS)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", *(["<extra_0>"] * tag)]})
    if chat_template:
        tokenizer.chat_template = QWEN_TEMPLATE
    config = _small(Qwen2Config, tokenizer)
    torch.manual_seed(1)
    tensors = {f"model.{k}": v.contiguous() for k, v in Qwen2Model(config).state_dict().items()}
    shapes = {"score.0": (HIDDEN, HIDDEN), "score.2": (2, HIDDEN)}
    for name in head:
        tensors[f"{name}.weight"] = torch.randn(shapes[name]) / HIDDEN**0.5  # probabilities away from 0 and 1
        tensors[f"{name}.bias"] = torch.randn(shapes[name][0])
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    spec = config.to_dict() | {
        "architectures": ["Qwen2ForProcessRewardModel"],
        "auto_map": {
            "AutoConfig": "configuration_qwen2_rm.Qwen2RMConfig",
            "AutoModel": "modeling_qwen2_rm.Qwen2ForProcessRewardModel",
        },
    }
    (path / "config.json").write_text(json.dumps(spec))
    tokenizer.save_pretrained(path)
    return path


def make_token_classification_prm(path):
    tokenizer = line_char_tokenizer(CHARS)
    torch.manual_seed(2)
    LlamaForTokenClassification(_small(LlamaConfig, tokenizer, num_labels=2)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("prms")
    return {
        "step_tag": make_step_tag_prm(root / "math-shepherd-tiny"),
        "qwen_prm": make_qwen_prm(root / "qwen-prm-tiny"),
        "token_classification": make_token_classification_prm(root / "trl-prm-tiny"),
    }


# ---- hand-written forward passes ---------------------------------------------------------------------------------


def hand_step_tag_scores(folder, question, steps):
    """Math-Shepherd's model card: `f"{question} {output}"`, steps `... ки` joined by newlines, BOS added; softmax
    over the logits of `+` and `-` at every `ки` token, P(+)."""
    prm = load_process_reward_model(folder, "step_tag")
    tok = prm.tokenizer
    text = question + " " + "\n".join(f"{s} ки" for s in steps)
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id
    tag = tok.convert_tokens_to_ids("ки")
    positions = [i for i, t in enumerate(ids) if t == tag]
    logits = prm.model(torch.tensor([ids])).logits[0, positions]
    good, bad = tok.convert_tokens_to_ids("+"), tok.convert_tokens_to_ids("-")
    return torch.softmax(logits[:, [good, bad]], dim=-1)[:, 0].tolist()


def hand_qwen_scores(folder, question, steps):
    """Qwen2.5-Math-PRM's model card: the chat (system, question, steps joined by <extra_0> and ended by one),
    softmax over the head's two logits at every <extra_0> token, class 1."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    text = (
        f"<|im_start|>system\n{QWEN_PRM_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
        f"<|im_start|>assistant\n{'<extra_0>'.join(steps)}<extra_0><|im_end|>\n"
    )
    ids = tok(text)["input_ids"]
    tag = tok.convert_tokens_to_ids("<extra_0>")
    positions = [i for i, t in enumerate(ids) if t == tag]
    assert len(positions) == len(steps)
    weights = load_file(str(folder / "model.safetensors"))
    body = Qwen2Model(Qwen2Config.from_pretrained(folder))
    body.load_state_dict({k.removeprefix("model."): v for k, v in weights.items() if k.startswith("model.")})
    hidden = body.eval()(torch.tensor([ids])).last_hidden_state[0, positions]
    h = F.relu(F.linear(hidden, weights["score.0.weight"], weights["score.0.bias"]))
    return torch.softmax(F.linear(h, weights["score.2.weight"], weights["score.2.bias"]), dim=-1)[:, 1].tolist()


def hand_token_classification_scores(folder, prompt, completion, separator):
    """TRL's PRM format as ProcessRewardModel reads it: prompt + completion ids, P(label 1) at each step's last
    token (one character a token here, so the step ends are the separators and the last character)."""
    prm = load_process_reward_model(folder, "token_classification", step_separator=separator)
    tok = prm.tokenizer
    ids = tok(prompt, add_special_tokens=False)["input_ids"] + tok(completion, add_special_tokens=False)["input_ids"]
    ends = [len(prompt) + i for i, ch in enumerate(completion) if ch == separator] + [len(prompt + completion) - 1]
    logits = prm.model(torch.tensor([ids])).logits[0, ends]
    return torch.softmax(logits, dim=-1)[:, 1].tolist()


# ---- scores ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy_separator", "joiner"), [("step_k", "\n"), ("newline", "\n\n"), (";", ";")])
def test_step_tag_scores_match_the_model_card_forward(folders, policy_separator, joiner):
    """Whatever the policy's separator, the steps reach the PRM in its own format: the same scores."""
    folder = folders["step_tag"]
    prm = load_process_reward_model(folder, step_separator=policy_separator)
    assert isinstance(prm, StepTagPRM) and not prm.model.training
    expected = hand_step_tag_scores(folder, QUESTION, STEPS)
    completions = [joiner.join(STEPS), joiner.join(STEPS[:1]), "", joiner.join(STEPS[:2])]
    got = prm(prompts=[PROMPT] * 4, completions=completions, question=[QUESTION] * 4, completion_ids=[[0]] * 4)
    assert got[0] == pytest.approx(expected, abs=1e-5) and len(expected) == 3
    assert got[1] == pytest.approx(hand_step_tag_scores(folder, QUESTION, STEPS[:1]), abs=1e-5)
    assert got[2] == []  # no steps, nothing scored
    assert got[3] == pytest.approx(hand_step_tag_scores(folder, QUESTION, STEPS[:2]), abs=1e-5)
    assert all(0.0 <= s <= 1.0 for row in got for s in row)


def test_step_tag_question_falls_back_to_the_prompt_and_batches_agree(folders):
    folder = folders["step_tag"]
    one_by_one = load_process_reward_model(folder, step_separator="step_k", batch_size=1)
    batched = load_process_reward_model(folder, step_separator="step_k", batch_size=3)
    completions = ["\n".join(STEPS[:k]) for k in (3, 1, 2, 3, 2)]
    prompts = [PROMPT, [{"role": "user", "content": QUESTION}], PROMPT, PROMPT, PROMPT]
    got = batched(prompts=prompts, completions=completions)  # no question column: the prompt's text
    alone = one_by_one(prompts=prompts, completions=completions)
    assert [len(row) for row in got] == [3, 1, 2, 3, 2]
    assert all(row == pytest.approx(expected, abs=1e-5) for row, expected in zip(got, alone, strict=True))
    assert got[1] == pytest.approx(hand_step_tag_scores(folder, QUESTION, STEPS[:1]), abs=1e-5)
    assert got[0] == pytest.approx(hand_step_tag_scores(folder, PROMPT, STEPS), abs=1e-5)


def test_qwen_prm_scores_match_the_model_card_forward_without_remote_code(folders):
    folder = folders["qwen_prm"]
    prm = load_process_reward_model(folder, step_separator="blank_line")  # detected from architectures
    assert isinstance(prm, QwenPRM) and not prm.model.training
    completions = ["\n\n".join(STEPS), STEPS[0], "  "]
    got = prm(prompts=[PROMPT] * 3, completions=completions, problem=[QUESTION] * 3)
    assert got[0] == pytest.approx(hand_qwen_scores(folder, QUESTION, STEPS), abs=1e-5)
    assert got[1] == pytest.approx(hand_qwen_scores(folder, QUESTION, STEPS[:1]), abs=1e-5)
    assert got[2] == []


def test_token_classification_scores_match_the_forward(folders):
    folder = folders["token_classification"]
    prm = load_process_reward_model(folder, step_separator=";")
    assert isinstance(prm, ProcessRewardModel)
    completion = "Step 1: 2+3=5;Step 2: 5*4=20;#20"
    got = prm(prompts=[PROMPT], completions=[completion])
    assert got == [pytest.approx(hand_token_classification_scores(folder, PROMPT, completion, ";"), abs=1e-5)]
    assert len(got[0]) == 3


# ---- formats, options and errors -------------------------------------------------------------------------------


def test_format_detection_and_its_error(folders, tmp_path):
    for name, folder in folders.items():
        assert detect_prm_format(folder) == name
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="cannot tell the format.*token_classification, step_tag, qwen_prm"):
        load_process_reward_model(tmp_path)
    with pytest.raises(ValueError, match="unknown value 'orm'; expected one of token_classification, step_tag"):
        load_process_reward_model(folders["step_tag"], "orm")
    with pytest.raises(TypeError, match="format 'qwen_prm' takes no step_tag"):
        load_process_reward_model(folders["qwen_prm"], step_tag="ки")


def test_step_tag_tokens_the_tokenizer_lacks_are_named(folders):
    folder = folders["step_tag"]
    with pytest.raises(ValueError, match=r"step_tag 'ДА' is not in the vocabulary of the PRM's tokenizer"):
        load_process_reward_model(folder, step_tag="ДА")
    with pytest.raises(ValueError, match=r"good_token '✓' is not in the vocabulary"):
        load_process_reward_model(folder, good_token="✓")
    with pytest.raises(
        ValueError, match=r"bad_token 'no' is not one token of the PRM's tokenizer .*: it encodes to 2 tokens"
    ):
        load_process_reward_model(folder, bad_token="no")


def test_qwen_prm_missing_head_tag_or_template_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"model\.safetensors\) have no score\.2\.weight, score\.2\.bias"):
        load_process_reward_model(make_qwen_prm(tmp_path / "no_head", head=("score.0",)))
    with pytest.raises(
        ValueError,
        match=r"qwen_prm step tag '<extra_0>' is not one token of the PRM's tokenizer .*: it encodes to 9 tokens",
    ):
        load_process_reward_model(make_qwen_prm(tmp_path / "no_tag", tag=False))
    with pytest.raises(ValueError, match="has no chat template"):
        load_process_reward_model(make_qwen_prm(tmp_path / "no_template", chat_template=False))


def test_weights_only_from_safetensors(folders, tmp_path):
    folder = tmp_path / "bin_only"
    folder.mkdir()
    (folder / "config.json").write_text((folders["step_tag"] / "config.json").read_text())
    torch.save({}, folder / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="no safetensors weights in .*bin_only"):
        load_process_reward_model(folder)


def test_missing_folders_and_unreachable_hub_ids_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="process_reward_model: no such model folder: /no/such/prm"):
        load_process_reward_model("/no/such/prm")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no model folder \\(config.json\\) at"):
        load_process_reward_model(tmp_path / "empty")
    # offline here (HF_HUB_OFFLINE=1): a hub id is fetched (configs, tokenizer, safetensors only) or named
    with pytest.raises(FileNotFoundError, match="'peiyi9979/math-shepherd-mistral-7b-prm' is not a local model folder"):
        load_process_reward_model("peiyi9979/math-shepherd-mistral-7b-prm")


def test_step_tag_that_does_not_end_a_token_is_an_error(tmp_path):
    """A tag the tokenizer merges with what follows (here `ки\\n` is one token) cannot be read at its own token."""
    folder = make_step_tag_prm(tmp_path / "merging", step_tag="ки")
    tok = line_char_tokenizer(CHARS, tags=("ки", "ки\n"), bos="<s>")
    tok.save_pretrained(folder)
    prm = load_process_reward_model(folder, step_separator="step_k")
    with pytest.raises(ValueError, match="step_tag 'ки': no token of the PRM's tokenizer ends where the tag ends"):
        prm(prompts=[QUESTION], completions=["\n".join(STEPS)])


def test_4bit_prms_on_cpu(folders):
    import bitsandbytes as bnb

    full = load_process_reward_model(folders["step_tag"], step_separator="step_k")
    quantized = load_process_reward_model(folders["step_tag"], step_separator="step_k", load_in_4bit=True)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in quantized.model.modules())
    completions = ["\n".join(STEPS)]
    assert quantized(prompts=[QUESTION], completions=completions)[0] == pytest.approx(
        full(prompts=[QUESTION], completions=completions)[0], abs=0.1
    )
    qwen = load_process_reward_model(folders["qwen_prm"], step_separator="newline", load_in_4bit=True)
    assert isinstance(qwen.model.model.layers[0].mlp.up_proj, bnb.nn.Linear4bit)
    assert type(qwen.model.score[0]) is torch.nn.Linear and qwen.model.score[0].weight.dtype == torch.float32
    scores = qwen(prompts=[QUESTION], completions=["\n".join(STEPS)])[0]
    assert scores == pytest.approx(hand_qwen_scores(folders["qwen_prm"], QUESTION, STEPS), abs=0.1)
    classifier = load_process_reward_model(folders["token_classification"], step_separator=";", load_in_4bit=True)
    assert isinstance(classifier.model.model.layers[0].mlp.up_proj, bnb.nn.Linear4bit)
    assert type(classifier.model.score) is torch.nn.Linear  # the 2-label head stays unquantised
    completion = "Step 1: 2+3=5;Step 2: 5*4=20;#20"
    assert classifier(prompts=[PROMPT], completions=[completion])[0] == pytest.approx(
        hand_token_classification_scores(folders["token_classification"], PROMPT, completion, ";"), abs=0.1
    )


# ---- the trainer's entry point -----------------------------------------------------------------------------------


def test_process_reward_model_from_config_places_the_prm_on_the_process_device(folders, tmp_path):
    args = GRPOExtConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        process_reward_model=str(folders["step_tag"]),
        process_reward_model_good_token="+",
        process_reward_model_batch_size=2,
        step_separator="step_k",
    )
    accelerator = SimpleNamespace(device=torch.device("cpu"))  # the function reads only the device
    prm = process_reward_model_from_config(args, accelerator)
    assert isinstance(prm, StepTagPRM) and prm.batch_size == 2 and prm.step_separator == "step_k"
    parameter = next(prm.model.parameters())
    assert parameter.device == torch.device("cpu") and parameter.dtype == torch.float32 and not prm.model.training
    got = prm(prompts=[PROMPT], completions=["\n".join(STEPS)], question=[QUESTION])
    assert got[0] == pytest.approx(hand_step_tag_scores(folders["step_tag"], QUESTION, STEPS), abs=1e-5)
    assert prm.__name__ == "prm_math-shepherd-tiny"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"process_reward_model_format": "step_tag"}, "process_reward_model_format: set without process_reward_model"),
        ({"process_reward_model_load_in_4bit": True}, "process_reward_model_load_in_4bit: set without"),
        ({"process_reward_model": "x", "process_reward_model_format": "orm"}, "unknown value 'orm'"),
        (
            {
                "process_reward_model": "x",
                "process_reward_model_format": "qwen_prm",
                "process_reward_model_step_tag": "t",
            },
            "process_reward_model_step_tag: only the `step_tag` format reads it",
        ),
        ({"process_reward_model": "x", "process_reward_model_bad_token": " "}, "bad_token: must be a non-empty"),
        (
            {"process_reward_model": "x", "process_reward_model_batch_size": 0},
            r"_batch_size: must be in \[1, inf\), got 0",
        ),
    ],
)
def test_config_validates_the_prm_fields(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", **overrides)


def test_a_grpo_step_with_process_advantages_from_a_step_tag_prm(folders, tmp_path):
    """The embedded policy (`;` steps) scored by a Math-Shepherd-format PRM through process_reward_funcs."""
    from tests.trainer_utils import tiny_args, tiny_trainer

    prm = load_process_reward_model(folders["step_tag"], step_separator=";")
    calls = []

    def counted(**kwargs):
        out = prm(**kwargs)
        calls.append(out)
        return out

    counted.__name__ = prm.__name__
    args = tiny_args(tmp_path=tmp_path, max_steps=1, advantage_mode="process", step_separator=";")
    trainer = tiny_trainer(args=args, process_reward_funcs=[counted])
    trainer.train()
    logged = next(h for h in trainer.state.log_history if "process/steps_per_completion" in h)
    assert calls and logged["process/steps_per_completion"] == pytest.approx(
        sum(len(row) for row in calls[0]) / len(calls[0])
    )
    assert 0.0 < logged["process/step_reward_mean"] < 1.0
