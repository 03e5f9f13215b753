"""Process reward models in the formats people publish: Math-Shepherd's step tags and Qwen2.5-Math-PRM.

Each is a callable with TRL's reward signature returning, for each completion, one score in [0, 1] per step. How a
completion reaches the PRM:

1. the policy's completion is split into steps by the policy's step rule (:func:`grpo_ext.reasoning_steps.step_texts`,
   the split the trainer maps to token indices with :func:`grpo_ext.reasoning_steps.step_end_token_indices`);
2. the steps are re-joined in the PRM's own input format, a tag after each step;
3. the PRM's score at the i-th tag is the i-th step's score, so it lands on the i-th step end of the policy's tokens
   whatever separator the policy writes and whatever tag the PRM reads.

The question: a PRM is trained on the bare problem, not on our prompt (instruction, few-shot examples). The
dataset's ``question`` column (GSM8K) or ``problem`` column (MATH), which TRL passes to reward functions, is used
when present; otherwise the prompt's text (the last message of a conversational prompt).

Models are placed whole on one device (``device_map={"": device}``: one copy per process), in eval mode, bf16 on a
GPU and float32 on the CPU unless ``dtype`` says otherwise, optionally 4-bit (bitsandbytes nf4), and scored in
batches of rows of similar length. Weights load from safetensors only; no remote code is ever run.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from grpo_ext.errors import UserError, user_file
from grpo_ext.reasoning_steps import step_texts
from grpo_ext.rewards.classifier import right_pad, with_pad_token
from grpo_ext.tasks.base import completion_text

__all__ = [
    "QUESTION_COLUMNS",
    "QWEN_PRM_STEP_TAG",
    "QWEN_PRM_SYSTEM_PROMPT",
    "STEP_TAG_DEFAULTS",
    "QwenPRM",
    "StepTagPRM",
    "load_qwen_prm",
    "load_step_tag_prm",
    "check_batch_size",
    "load_whole",
    "model_load_kwargs",
    "prm_questions",
    "qwen_prm_messages",
    "step_tag_text",
]

#: Math-Shepherd (peiyi9979/math-shepherd-mistral-7b-prm): tag after each step, and the two tokens scored there.
STEP_TAG_DEFAULTS = {"step_tag": "ки", "good_token": "+", "bad_token": "-"}
QWEN_PRM_STEP_TAG = "<extra_0>"
#: The system message of Qwen2.5-Math-PRM's model card.
QWEN_PRM_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
QUESTION_COLUMNS = ("question", "problem")


# ---- inputs (pure) -------------------------------------------------------------------------------------------


def prm_questions(prompts: list, kwargs: dict) -> list[str]:
    """The question each PRM input starts with: a ``question``/``problem`` column when TRL passes one, else the
    prompt's text."""
    for column in QUESTION_COLUMNS:
        values = kwargs.get(column)
        if isinstance(values, list) and len(values) == len(prompts) and all(isinstance(v, str) for v in values):
            return values
    return [completion_text(p) for p in prompts]


def step_tag_text(question: str, steps: Sequence[str], step_tag: str) -> tuple[str, list[int]]:
    """Math-Shepherd's input: the question, a space, the steps joined by ``\\n``, each followed by `` <tag>``; and
    the character offset just past each tag."""
    text, tag_ends = f"{question} ", []
    for i, step in enumerate(steps):
        text += ("\n" if i else "") + f"{step} {step_tag}"
        tag_ends.append(len(text))
    return text, tag_ends


def qwen_prm_messages(question: str, steps: Sequence[str], system_prompt: str = QWEN_PRM_SYSTEM_PROMPT) -> list[dict]:
    """Qwen2.5-Math-PRM's conversation: system, the question, then the steps each ended by ``<extra_0>``."""
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": question},
        {"role": "assistant", "content": "".join(f"{step}{QWEN_PRM_STEP_TAG}" for step in steps)},
    ]


# ---- loading -------------------------------------------------------------------------------------------------


def prm_dtype(device) -> torch.dtype:
    """bf16 on a GPU (fp16 where bf16 is unsupported), float32 elsewhere."""
    if device is not None and torch.device(device).type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def model_load_kwargs(device=None, dtype=None, load_in_4bit: bool = False, keep_modules=None) -> dict:
    """``from_pretrained`` arguments: safetensors only, the dtype, the whole model on `device`, optional nf4.

    `keep_modules` are left unquantised in 4-bit (a small head whose precision matters)."""
    dtype = dtype or prm_dtype(device)
    kwargs: dict = {"use_safetensors": True, "dtype": dtype}
    if device is not None:
        kwargs["device_map"] = {"": torch.device(device)}
    if load_in_4bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=dtype,
            llm_int8_skip_modules=keep_modules,
        )
    return kwargs


def check_batch_size(batch_size) -> None:
    """A PRM's scoring batch: an integer >= 1 (`range(0, n, 0)` would fail deep inside a training step)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"process_reward_model_batch_size: must be an integer >= 1, got {batch_size!r}")


def load_whole(model_class, folder: Path, prm_format: str, **kwargs):
    """`model_class.from_pretrained(folder, **kwargs)`, refusing a folder whose weights lack some of the model's:
    transformers would start them at random (a causal LM's folder read as a token classifier gets a random score
    head) and the PRM would score noise without a word."""
    model, info = model_class.from_pretrained(folder, output_loading_info=True, **kwargs)
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise UserError(
            f"process_reward_model: the weights in {folder} have no {shown}, which a {prm_format} PRM needs "
            "(transformers would start them at random): is this folder a PRM of that format?"
        )
    return model


def _tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return with_pad_token(AutoTokenizer.from_pretrained(folder, trust_remote_code=False))


def _single_token_id(tokenizer, text: str, field: str, folder: Path) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids or (tokenizer.unk_token_id is not None and tokenizer.unk_token_id in ids):
        raise UserError(f"{field} {text!r} is not in the vocabulary of the PRM's tokenizer ({folder})")
    if len(ids) != 1:
        raise UserError(
            f"{field} {text!r} is not one token of the PRM's tokenizer ({folder}): it encodes to {len(ids)} tokens"
        )
    return ids[0]


# ---- scoring -------------------------------------------------------------------------------------------------


class _TaggedStepPRM:
    """Shared by the formats: split, encode (subclass), batch rows by length, score at tag positions (subclass)."""

    def __init__(self, model, tokenizer, step_separator: str, batch_size: int, name: str):
        check_batch_size(batch_size)
        self.model, self.tokenizer = model.eval(), tokenizer
        self.step_separator, self.batch_size, self.__name__ = step_separator, batch_size, name

    def encode(self, question: str, steps: list[str]) -> tuple[list[int], list[int]]:
        """``(input_ids, tag positions)`` of one completion's PRM input, one position per step."""
        raise NotImplementedError

    def score_batch(self, batch: dict[str, torch.Tensor], positions: list[list[int]]) -> list[list[float]]:
        """P(good step) at each row's tag positions."""
        raise NotImplementedError

    @torch.no_grad()
    def __call__(self, prompts: list, completions: list, **kwargs) -> list[list[float]]:
        questions = prm_questions(prompts, kwargs)
        rows: list[tuple[list[int], list[int]] | None] = []
        for question, completion in zip(questions, completions, strict=True):
            steps = step_texts(completion_text(completion), self.step_separator)
            rows.append(self.encode(question, steps) if steps else None)  # no steps: nothing to score
        scores: list[list[float]] = [[] for _ in completions]
        order = sorted((i for i, row in enumerate(rows) if row is not None), key=lambda i: len(rows[i][0]))
        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            batch = {k: v.to(device) for k, v in right_pad([rows[i][0] for i in chunk], pad).items()}
            for i, row_scores in zip(chunk, self.score_batch(batch, [rows[i][1] for i in chunk]), strict=True):
                scores[i] = row_scores
        return scores


class StepTagPRM(_TaggedStepPRM):
    """Math-Shepherd format: a causal LM; a step's score is P(good) of the softmax over the logits of `good_token`
    and `bad_token` at the step's tag (the token that ends the tag)."""

    def __init__(self, model, tokenizer, step_tag: str, good_id: int, bad_id: int, **kwargs):
        super().__init__(model, tokenizer, **kwargs)
        self.step_tag, self.candidate_ids = step_tag, [good_id, bad_id]
        # Only the tag positions' logits are needed: skip the vocabulary-wide projection everywhere else.
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    def encode(self, question: str, steps: list[str]) -> tuple[list[int], list[int]]:
        text, tag_ends = step_tag_text(question, steps, self.step_tag)
        # Special tokens as the model card's `tokenizer.encode` adds them (Mistral's BOS).
        encoding = self.tokenizer(text, return_offsets_mapping=True)
        token_ending_at = {end: i for i, (start, end) in enumerate(encoding["offset_mapping"]) if end > start}
        positions = []
        for tag_end in tag_ends:
            if tag_end not in token_ending_at:
                raise UserError(
                    f"step_tag {self.step_tag!r}: no token of the PRM's tokenizer ends where the tag ends in "
                    f"{text[max(0, tag_end - 40) : tag_end + 10]!r}; the tag must end a token"
                )
            positions.append(token_ending_at[tag_end])
        return list(encoding["input_ids"]), positions

    def score_batch(self, batch, positions):
        keep = sorted({p for row in positions for p in row})
        column = {p: j for j, p in enumerate(keep)}
        if self._keeps_logits:
            keep_ids = torch.tensor(keep, device=batch["input_ids"].device)
            logits = self.model(**batch, logits_to_keep=keep_ids, use_cache=False).logits
        else:
            logits = self.model(**batch, use_cache=False).logits[:, keep]
        p_good = logits[..., self.candidate_ids].float().softmax(dim=-1)[..., 0].tolist()
        return [[p_good[b][column[p]] for p in row] for b, row in enumerate(positions)]


class QwenPRM(_TaggedStepPRM):
    """Qwen2.5-Math-PRM format: the chat template over (system, question, steps each ended by ``<extra_0>``); a
    step's score is softmax[1] of the two-class head at its ``<extra_0>`` token."""

    def __init__(self, model, tokenizer, tag_id: int, system_prompt: str = QWEN_PRM_SYSTEM_PROMPT, **kwargs):
        super().__init__(model, tokenizer, **kwargs)
        self.tag_id, self.system_prompt = tag_id, system_prompt

    def encode(self, question: str, steps: list[str]) -> tuple[list[int], list[int]]:
        # A literal "<extra_0>" in the text would be read as a step end: drop it so tags and steps pair up.
        question, steps = question.replace(QWEN_PRM_STEP_TAG, ""), [s.replace(QWEN_PRM_STEP_TAG, "") for s in steps]
        messages = qwen_prm_messages(question, steps, self.system_prompt)
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        ids = list(self.tokenizer(text)["input_ids"])  # as the model card's `tokenizer.encode(conversation_str)`
        positions = [i for i, t in enumerate(ids) if t == self.tag_id]
        if len(positions) != len(steps):
            raise UserError(
                f"qwen_prm: the PRM input holds {len(positions)} {QWEN_PRM_STEP_TAG} tokens for {len(steps)} steps; "
                "the tokenizer's chat template must keep the assistant text as it is"
            )
        return ids, positions

    def score_batch(self, batch, positions):
        hidden = self.model.model(**batch, use_cache=False).last_hidden_state
        rows = torch.tensor([b for b, row in enumerate(positions) for _ in row], device=hidden.device)
        cols = torch.tensor([p for row in positions for p in row], device=hidden.device)
        p_good = self.model.score(hidden[rows, cols]).float().softmax(dim=-1)[:, 1].tolist()
        out, start = [], 0
        for row in positions:
            out.append(p_good[start : start + len(row)])
            start += len(row)
        return out


def load_step_tag_prm(
    folder: str | os.PathLike,
    *,
    step_tag: str = STEP_TAG_DEFAULTS["step_tag"],
    good_token: str = STEP_TAG_DEFAULTS["good_token"],
    bad_token: str = STEP_TAG_DEFAULTS["bad_token"],
    step_separator: str = "\n",
    batch_size: int = 16,
    device=None,
    dtype=None,
    load_in_4bit: bool = False,
) -> StepTagPRM:
    """A Math-Shepherd-style PRM from a causal-LM folder; its tokens are checked before the weights load."""
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    tokenizer = _tokenizer(folder)
    tag_ids = tokenizer(step_tag, add_special_tokens=False)["input_ids"]
    if not tag_ids or (tokenizer.unk_token_id is not None and tokenizer.unk_token_id in tag_ids):
        raise UserError(f"step_tag {step_tag!r} is not in the vocabulary of the PRM's tokenizer ({folder})")
    good_id = _single_token_id(tokenizer, good_token, "good_token", folder)
    bad_id = _single_token_id(tokenizer, bad_token, "bad_token", folder)
    if good_id == bad_id:
        raise UserError(f"good_token {good_token!r} and bad_token {bad_token!r} are the same token ({good_id})")
    model = load_whole(
        AutoModelForCausalLM,
        folder,
        "step_tag",
        trust_remote_code=False,
        **model_load_kwargs(device, dtype, load_in_4bit),
    )
    return StepTagPRM(
        model,
        tokenizer,
        step_tag,
        good_id,
        bad_id,
        step_separator=step_separator,
        batch_size=batch_size,
        name=f"prm_{folder.name}",
    )


def load_qwen_prm(
    folder: str | os.PathLike,
    *,
    system_prompt: str = QWEN_PRM_SYSTEM_PROMPT,
    step_separator: str = "\n",
    batch_size: int = 16,
    device=None,
    dtype=None,
    load_in_4bit: bool = False,
) -> QwenPRM:
    """A Qwen2.5-Math-PRM-style PRM: transformers' Qwen2 body and our head module (no remote code)."""
    from transformers import Qwen2Config

    from grpo_ext.rewards.qwen_prm import Qwen2ProcessRewardModel, check_head_tensors

    folder = Path(folder)
    with user_file(folder / "config.json", "process_reward_model"):  # Qwen2Config reads any config as its own
        model_type = json.loads((folder / "config.json").read_text()).get("model_type")
    if model_type != "qwen2":
        raise UserError(f"qwen_prm: {folder}/config.json has model_type {model_type!r}, expected 'qwen2'")
    config = Qwen2Config.from_pretrained(folder)
    tokenizer = _tokenizer(folder)
    if not tokenizer.chat_template:
        raise UserError(
            f"qwen_prm: the tokenizer in {folder} has no chat template (tokenizer_config.json 'chat_template' or "
            "chat_template.jinja); the PRM reads a system/user/assistant conversation"
        )
    tag_id = _single_token_id(tokenizer, QWEN_PRM_STEP_TAG, "qwen_prm step tag", folder)
    check_head_tensors(folder, config.hidden_size)
    model = load_whole(
        Qwen2ProcessRewardModel,
        folder,
        "qwen_prm",
        config=config,
        **model_load_kwargs(device, dtype, load_in_4bit, keep_modules=["score"]),
    )
    return QwenPRM(
        model,
        tokenizer,
        tag_id,
        system_prompt,
        step_separator=step_separator,
        batch_size=batch_size,
        name=f"prm_{folder.name}",
    )
