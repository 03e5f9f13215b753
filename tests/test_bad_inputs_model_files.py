"""The bad-input table for model files and prompts: prompts and completions past the model's positions, model folders
whose files disagree (tokenizer, config against weights, an adapter against its base, a chat template that fails),
the harness given an unfinished run or one model twice. Each ends a CLI with one line naming the culprit and exit
code 2 (`tests/test_bad_inputs.py`'s check), through the code path the CLI takes: scripts/train.py, the harness
(evals/passk_majk.py) and scripts/publish.py."""

import json
import os
import shutil
from pathlib import Path

import pytest

from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from scripts import publish, train
from tests.bad_inputs import check_one_line
from tests.trainer_utils import TRAIN_ARGV

QUESTIONS = ["12+3=", "7+8=", "40-1=", "5+5="]


def harness_main(argv):
    from evals.passk_majk import main

    return main(argv)


def questions(tmp: Path, rows=QUESTIONS) -> Path:
    path = tmp / "questions.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": "1"}) + "\n" for q in rows))
    return path


def jsonl_kwargs(tmp: Path, rows=QUESTIONS, conversational=False) -> str:
    return json.dumps({"path": str(questions(tmp, rows)), "conversational": conversational})


def train_flags(tmp: Path, model, *flags):
    out = str(tmp / "out")
    return [*TRAIN_ARGV, "--max_steps", "1", "--output_dir", out, "--model_name_or_path", str(model), *flags]


def harness_flags(tmp: Path, *flags):
    return ["--n", "2", "--limit", "2", "--no-progress", "--out", str(tmp / "report"), *flags]


def damaged(damage):
    """A copy of the embedded model at tmp/model, damaged by `damage(folder, tmp)`."""

    def make(tmp):
        folder = tmp / "model"
        shutil.copytree(EMBEDDED_MODEL_DIR, folder)
        damage(folder, tmp)
        return folder

    return make


def edit_config(**fields):
    def damage(folder, tmp):
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **fields}))

    return damage


def write_file(name, text):
    return lambda folder, tmp: (folder / name).write_text(text)


def adapter(base_of):
    """A LoRA adapter of the embedded model at tmp/adapter whose adapter_config.json names `base_of(tmp, folder)`."""

    def make(tmp):
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        folder = tmp / "adapter"
        model = AutoModelForCausalLM.from_pretrained(str(EMBEDDED_MODEL_DIR))
        get_peft_model(model, LoraConfig(r=2, target_modules="all-linear")).save_pretrained(str(folder))
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(EMBEDDED_MODEL_DIR / name, folder / name)
        config = json.loads((folder / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = str(base_of(tmp, folder))
        (folder / "adapter_config.json").write_text(json.dumps(config))
        return folder

    return make


def wider_base(tmp, folder):
    from tests.rewards.test_reward_models import make_tiny_policy

    return make_tiny_policy(tmp / "wider", hidden=48)


def itself(tmp, folder):
    return folder


def train_on(make, *flags, conversational=False):
    def trigger(tmp):
        extra = ("--task", "jsonl", "--task_kwargs", jsonl_kwargs(tmp, conversational=True)) if conversational else ()
        return train.main(train_flags(tmp, make(tmp), *extra, *flags))

    return trigger


def harness_on(make, *flags, conversational=False):
    def trigger(tmp):
        task = ("--task", "jsonl", "--split", "train", "--task-kwargs", jsonl_kwargs(tmp, conversational=True))
        return harness_main(harness_flags(tmp, "--model", str(make(tmp)), *(task if conversational else ()), *flags))

    return trigger


def publish_of(make):
    def trigger(tmp):
        folder = make(tmp)
        return publish.main([str(folder), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp / "up"), "--merge"])

    return trigger


def long_prompt_training(tmp):
    rows = [*QUESTIONS[:2], "1+" * 80 + "1=", QUESTIONS[3]]  # prompt 2: 162 characters, the char tokenizer's tokens
    return train.main(train_flags(tmp, "embedded", "--task", "jsonl", "--task_kwargs", jsonl_kwargs(tmp, rows)))


def long_prompt_harness(tmp):
    rows = ["1+" * 70 + "1=", *QUESTIONS]
    task = ("--task", "jsonl", "--split", "train", "--task-kwargs", jsonl_kwargs(tmp, rows))
    return harness_main(harness_flags(tmp, *task, "--max-new-tokens", "8"))


def run_folder(status):
    def make(tmp):
        folder = tmp / "run"
        shutil.copytree(EMBEDDED_MODEL_DIR, folder)
        (folder / "grpo_ext_run.json").write_text(json.dumps({"status": status, "global_step": 3, "error": "killed"}))
        return folder

    return make


def same_model_twice(spell):
    def trigger(tmp):
        folder = tmp / "x"
        shutil.copytree(EMBEDDED_MODEL_DIR, folder)
        first, second = spell(tmp, folder)
        return harness_main(harness_flags(tmp, "--model", first, "--model", second))

    return trigger


def via_symlink(tmp, folder):
    os.symlink(folder, tmp / "link")
    return str(folder), str(tmp / "link")


def relative_spellings(tmp, folder):
    os.chdir(tmp)  # restored by the monkeypatched cwd fixture below
    return "./x", "x/"


BAD_TOKENIZER = '{"version": "1.0", "model": {"type": "nonsense"}}'
TEMPLATES = {
    "raises": ("{{ raise_exception('no system role') }}", r"TemplateError: no system role"),
    "does not parse": ("{% if messages %}{{ messages[0]['content'] ", r"TemplateSyntaxError"),
    "loops past the sandbox's range": ("{% for i in range(10**8) %}x{% endfor %}", r"OverflowError: Range too big"),
    "trips the security check": ("{{ messages.__class__.__mro__ }}", r"SecurityError: access to attribute '__class__'"),
}

CASES = {
    # 1. prompts and completions past the model's positions (the embedded model has 128)
    "train: a prompt past the positions": (
        long_prompt_training,
        r"task 'jsonl' train prompts: prompt 2 is 16\d tokens; with max_completion_length 16 it needs 1\d\d positions, "
        r"more than the model's 128 \(max_position_embeddings\)",
    ),
    "train: prompt + max_completion_length past the positions": (
        lambda tmp: train.main(train_flags(tmp, "embedded", "--max_completion_length", "125")),
        r"train prompts: prompt \d+ is \d+ tokens; with max_completion_length 125 it needs \d+ positions, more than "
        r"the model's 128 .* prompts do not fit",
    ),
    "harness: a prompt past the positions": (
        long_prompt_harness,
        r"--model embedded: prompt 0 \(problem id 0\) is 14\d tokens; with --max-new-tokens 8 it needs 1\d\d positions",
    ),
    "harness: --max-new-tokens past the positions": (
        lambda tmp: harness_main(harness_flags(tmp, "--max-new-tokens", "400")),
        r"--model embedded: prompt \d+ \(problem id .*\) is \d+ tokens; with --max-new-tokens 400 it needs 4\d\d "
        r"positions, more than the model's 128",
    ),
    # 2. model folders whose files disagree
    "train: an invalid tokenizer.json": (
        train_on(damaged(write_file("tokenizer.json", BAD_TOKENIZER))),
        r"model_name_or_path: .*model/tokenizer\.json is not a tokenizer the tokenizers library can load",
    ),
    "harness: a tokenizer.json that is not JSON": (
        harness_on(damaged(write_file("tokenizer.json", '{"version": '))),
        r"model: .*model/tokenizer\.json is not valid JSON",
    ),
    "publish: an invalid tokenizer.json": (
        publish_of(damaged(write_file("tokenizer.json", BAD_TOKENIZER))),
        r"CHECKPOINT: .*tokenizer\.json is not a tokenizer",
    ),
    "train: config.json hidden_size against the weights": (
        train_on(damaged(edit_config(hidden_size=96, head_dim=48))),
        r"model_name_or_path: .*model/config\.json disagrees with the weights: model\.embed_tokens\.weight is "
        r"\[20, 64\] in model\.safetensors, the config makes it \[20, 96\]",
    ),
    "harness: config.json vocab_size against the weights": (
        harness_on(damaged(edit_config(vocab_size=40))),
        r"model: .*config\.json disagrees with the weights: model\.embed_tokens\.weight is \[20, 64\] .* \[40, 64\]",
    ),
    "harness: config.json with more layers than the weights (was scored with random layers)": (
        harness_on(damaged(edit_config(num_hidden_layers=4))),
        r"config\.json disagrees with the weights: 18 tensors it makes are not in the weights file \(first: "
        r"model\.layers\.2\..*\): they would be initialised at random",
    ),
    "publish: config.json with fewer layers than the weights": (
        publish_of(damaged(edit_config(num_hidden_layers=1))),
        r"CHECKPOINT: .*config\.json disagrees with the weights: 9 tensors of the weights file are not in the model",
    ),
    "harness: an adapter onto a base of another shape": (
        harness_on(adapter(wider_base)),
        r"model: the adapter .*adapter does not fit its base .*wider: .*lora_A\.weight in adapter_model\.safetensors "
        r"has input size \d+, the base's .* has \d+ \(an adapter of another model\)",
    ),
    "publish --merge: an adapter onto a base of another shape": (
        publish_of(adapter(wider_base)),
        r"CHECKPOINT: the adapter .* does not fit its base",
    ),
    "harness: an adapter naming itself as its base": (
        harness_on(adapter(itself)),
        r"model: .*adapter/adapter_config\.json names the adapter itself as its base_model_name_or_path",
    ),
    "train: an adapter folder as the model": (
        train_on(adapter(itself)),
        r"model_name_or_path: .*adapter is a PEFT adapter \(adapter_config\.json, no config\.json\)",
    ),
    "train: conversations on a model without a chat template": (
        train_on(lambda tmp: EMBEDDED_MODEL_DIR, conversational=True),
        r"model_name_or_path: the prompts are conversations but the tokenizer of .*embedded has no chat template",
    ),
    **{
        f"train: a chat template that {name}": (
            train_on(damaged(write_file("chat_template.jinja", text)), conversational=True),
            rf"model_name_or_path: the chat template in .*model/chat_template\.jinja fails on the prompts \({error}",
        )
        for name, (text, error) in TEMPLATES.items()
    },
    **{
        f"harness: a chat template that {name}": (
            harness_on(damaged(write_file("chat_template.jinja", text)), conversational=True),
            rf"--model .*model: the chat template in .*chat_template\.jinja fails on the prompts \({error}",
        )
        for name, (text, error) in TEMPLATES.items()
    },
    "publish: a chat template that does not parse": (
        publish_of(damaged(write_file("chat_template.jinja", TEMPLATES["does not parse"][0]))),
        r"CHECKPOINT: the chat template in .*chat_template\.jinja does not parse \(TemplateSyntaxError",
    ),
    # 3. the harness's models: unfinished runs, one model under two paths
    "harness: a failed run": (
        harness_on(run_folder("failed")),
        r"--model .*run: the training run in .*run did not finish \(grpo_ext_run\.json: failed at step 3: killed\); "
        r".*--allow-unfinished",
    ),
    "harness: a run still running": (
        harness_on(run_folder("running")),
        r"the training run in .*run did not finish \(grpo_ext_run\.json: running at step 3",
    ),
    "harness: one model through a symlink": (
        same_model_twice(via_symlink),
        r"--model .*link and --model .*x are the same model \(.*x\): a model would be compared with itself",
    ),
    "harness: one model as ./x and x/": (
        same_model_twice(relative_spellings),
        r"--model x/ and --model \./x are the same model",
    ),
    "harness: embedded and its folder": (
        lambda tmp: harness_main(harness_flags(tmp, "--model", "embedded", "--model", str(EMBEDDED_MODEL_DIR) + "/")),
        r"--model .*embedded/ and --model embedded are the same model",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_input_is_one_line_exit_2_naming_the_culprit(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the repository root, as the CLIs run; restored after
    check_one_line(*CASES[case], tmp_path, capsys)


def test_an_unfinished_run_is_scored_with_allow_unfinished_and_the_report_says_so(tmp_path, capsys):
    folder = run_folder("failed")(tmp_path)
    harness_main(harness_flags(tmp_path, "--model", str(folder), "--allow-unfinished"))
    (result,) = json.loads((tmp_path / "report" / "report.json").read_text())["models"]
    assert any("did not finish (grpo_ext_run.json: failed at step 3" in w for w in result["warnings"])
    assert "did not finish" in (tmp_path / "report" / "report.md").read_text()
    assert "did not finish" in capsys.readouterr().err  # said on the terminal too


def test_what_stays_accepted(tmp_path, monkeypatch):
    """A finished run, a model and its adapter side by side, a prompt that just fits and a folder whose chat template
    is never read (plain-text prompts) are scored as before."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    run = run_folder("complete")(tmp_path)
    (run / "chat_template.jinja").write_text(TEMPLATES["raises"][0])  # the arithmetic prompts are plain text
    lora = adapter(lambda tmp, folder: EMBEDDED_MODEL_DIR)(tmp_path)
    out = harness_main(harness_flags(tmp_path, "--model", str(run), "--model", str(lora), "--max-new-tokens", "100"))
    assert [r["model"] for r in out["results"]] == [str(run), str(lora)]
    assert all(r["warnings"] == [] for r in out["results"])
