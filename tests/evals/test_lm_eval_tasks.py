"""lm-eval tasks in evals/lm_eval_tasks: they load offline, serve any registered task, and the pass@k / maj@k
lm-eval reports are exactly grpo_ext.evaluation.metrics applied to the very generations lm-eval logged."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from datasets import Dataset

from grpo_ext.errors import UserError
from grpo_ext.evaluation.metrics import maj_at_k, pass_at_k
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from grpo_ext.tasks import TASKS, HarnessDefaults, Task
from grpo_ext.tasks.arithmetic import ArithmeticTask
from grpo_ext.tasks.gsm8k import GSM8KTask

ROOT = Path(__file__).resolve().parents[2]
TASKS_DIR = ROOT / "evals" / "lm_eval_tasks"
GSM8K_FILE = ROOT / "tests" / "fixtures" / "gsm8k_sample.jsonl"


def _load_utils():
    spec = importlib.util.spec_from_file_location("grpo_ext_lm_eval_utils", TASKS_DIR / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


utils = _load_utils()


def _ours(task, generations: list[str], reference: str, ks) -> dict[str, float]:
    """pass@k and maj@k straight from our functions, for comparison."""
    answers = [task.extract_answer(g) for g in generations]
    correct = [task.is_correct(g, reference) for g in generations]
    out = {}
    for k in ks:
        out[f"pass@{k}"] = pass_at_k(len(generations), sum(correct), k)
        out[f"maj@{k}"] = maj_at_k(answers, correct, k)
    return out


# ---- the task functions, without a model --------------------------------------------------------------------------


def _doc(answer: str, **metadata) -> dict:
    """A document as lm-eval hands it to process_results: a row of the dataset the YAML's loader made."""
    return {**utils.task_dataset(n=1, **metadata)["test"][0], "answer": answer}


def test_process_results_receives_all_samples_and_uses_our_metrics():
    generations = ["1+2=3;#3", "1+2=3;#3", "1+2=4;#4", "garbage", "1+2=4;#4", "1+2=3;#3"]
    metrics = utils.process_results(_doc("3", grpo_ext_task="arithmetic"), [generations])
    assert set(metrics) == {"pass@1", "pass@2", "pass@4", "maj@1", "maj@2", "maj@4"}  # only k <= 6 samples
    assert metrics == _ours(ArithmeticTask(), generations, "3", (1, 2, 4))
    assert metrics["pass@1"] == pytest.approx(0.5)
    # the filter hands every generation of every document through unchanged
    assert utils.keep_all_samples([["a", "b"], ["c", "d"]], [{}, {}]) == [["a", "b"], ["c", "d"]]
    gsm = ["so \\boxed{12}", "#### 12", "It is 13", "no idea"]
    doc = _doc("12", grpo_ext_task="gsm8k", data_files=str(GSM8K_FILE))
    assert utils.process_results(doc, [gsm]) == _ours(GSM8KTask(), gsm, "12", (1, 2, 4))


def test_every_yaml_lists_the_registrys_metric_list():
    """lm-eval reads a static YAML: each task's metric_list (its own or included) is the registry's headline metrics at
    the registry's ks, in order."""
    for path in sorted(TASKS_DIR.glob("*.yaml")):
        assert _config(path)["metric_list"] == utils.metric_list(), path.name
    assert [m.name for m in utils.REPORTED] == ["pass@k", "maj@k"] and utils.KS == (1, 2, 4, 8, 16)


def test_custom_datasets_take_their_knobs_and_ignore_other_metadata(monkeypatch):
    # lm-eval passes the YAML metadata, --metadata and the model args all together
    data = utils.task_dataset(grpo_ext_task="arithmetic", version=1.0, pretrained="some/model", n=5, max_operands=3)
    assert data["test"]["prompt"] == ArithmeticTask(max_operands=3).load("test", 5)["prompt"]
    assert len(utils.task_dataset(grpo_ext_task="arithmetic")["test"]) == 200  # the task's harness limit
    monkeypatch.delenv(utils.data_files_env("gsm8k"), raising=False)
    from_kwargs = utils.task_dataset(grpo_ext_task="gsm8k", version=1.0, data_files=str(GSM8K_FILE), n=3)["test"]
    assert from_kwargs["answer"] == ["405", "108", "292"]
    monkeypatch.setenv(utils.data_files_env("gsm8k"), str(GSM8K_FILE))
    assert len(utils.task_dataset(grpo_ext_task="gsm8k")["test"]) == 8  # no limit: the whole file
    fewshot = utils.task_knobs("gsm8k", {"prompt_fewshot": 2, "seed": 3, "pretrained": "m"})
    assert fewshot == {"num_fewshot": 2, "data_files": str(GSM8K_FILE)}  # seed is not a GSM8KTask knob
    with pytest.raises(UserError, match="unknown task 'gsm9k'; known tasks: arithmetic"):
        utils._task_dataset(grpo_ext_task="gsm9k")
    with pytest.raises(UserError, match="no 'grpo_ext_task'"):
        utils._task_dataset(n=3)


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({"grpo_ext_task": "gsm9k"}, "unknown task 'gsm9k'; known tasks: arithmetic"),
        ({"grpo_ext_task": "gsm8k", "prompt_fewshot": -1}, "prompt_fewshot: expected an integer >= 0, got -1"),
        ({"grpo_ext_task": "gsm8k", "prompt_fewshot": 1.5}, r"prompt_fewshot: expected an integer >= 0, got 1\.5"),
    ],
    ids=["unknown task", "negative shots", "fractional shots"],
)
def test_bad_metadata_ends_lm_eval_with_one_line(metadata, message, capsys, monkeypatch):
    """lm-eval printed our traceback for an unknown task or a negative num_fewshot: one line and exit 2 now."""
    import re

    monkeypatch.setenv(utils.data_files_env("gsm8k"), str(GSM8K_FILE))
    with pytest.raises(SystemExit) as exit_info:
        utils.task_dataset(**metadata)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and re.search(message, err), err


def _config(path: Path) -> dict:
    """A task YAML as lm-eval reads it (its includes merged, local keys winning; !function tags left as text)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(path, resolve_func=False)


def test_every_yaml_stops_where_its_task_stops():
    """`until` is the task's stop_strings: lm-eval stops and cuts each generation where the harness would."""
    configs = {path.name: _config(path) for path in sorted(TASKS_DIR.glob("*.yaml"))}
    assert set(configs) == {"grpo_ext_arithmetic.yaml", "grpo_ext_gsm8k.yaml", "grpo_ext_word_arithmetic.yaml"}
    for name, config in configs.items():
        task = TASKS[config["metadata"]["grpo_ext_task"]]
        assert config["generation_kwargs"]["until"] == list(task.stop_strings), name
    assert configs["grpo_ext_gsm8k.yaml"]["generation_kwargs"]["until"] == ["Question:"]
    word = configs["grpo_ext_word_arithmetic.yaml"]
    assert word["metadata"]["conversational"] is False and word["filter_list"][0]["name"] == "all"
    data = utils.task_dataset(**word["metadata"], n=2)["test"]  # text prompts, the question last
    assert all(isinstance(p, str) and p.endswith("Answer:") for p in data["prompt"])


def test_the_filter_cuts_each_generation_where_its_task_stops_as_lm_eval_cuts():
    """A task named over another task's YAML (until: []) is scored on the text lm-eval's until would have left."""
    from lm_eval.models.utils import postprocess_generated_text

    word = _doc("12", grpo_ext_task="word_arithmetic", conversational=False)
    plain = _doc("3", grpo_ext_task="arithmetic")
    rambling = ["34 - 22 = 12\n\nQuestion: Mia has 3 cups.", "#### 12", "Question: at once"]
    cut = utils.keep_all_samples([rambling, ["1+2=3;#3Question:"]], [word, plain])
    assert cut == [["34 - 22 = 12\n\n", "#### 12", ""], ["1+2=3;#3Question:"]]  # arithmetic: no stop
    assert cut[0] == [postprocess_generated_text(g, ["Question:"], None) for g in rambling]
    # scored on the cut text: the first sample's last number is its 12, not the invented question's 3
    assert utils.process_results(word, [cut[0]])["pass@1"] == pytest.approx(2 / 3)
    assert utils.process_results(word, [rambling])["pass@1"] == pytest.approx(1 / 3)


class EchoTask(Task):
    """A task defined here and registered by the test: the glue must serve it with no change of its own."""

    name = "echo"
    harness_defaults = HarnessDefaults(limit=3, max_new_tokens=8)

    def __init__(self, answers: int = 5):
        self.answers = answers

    def load(self, split: str, n: int | None = None) -> Dataset:
        return Dataset.from_list([{"prompt": f"say {i}:", "answer": str(i)} for i in range(self.answers)][:n])

    def extract_answer(self, completion: str) -> str | None:
        return completion.strip() or None


def test_a_registered_task_is_served_by_the_generic_glue(monkeypatch):
    monkeypatch.setitem(TASKS, "echo", EchoTask)
    data = utils.task_dataset(grpo_ext_task="echo", answers=4, version=1.0)["test"]
    assert data["answer"] == ["0", "1", "2"]  # its harness limit, of the 4 problems its knob asked for
    assert json.loads(data[0][utils.TASK_KEY]) == {"task": "echo", "task_kwargs": {"answers": 4}}
    metrics = utils.process_results(data[1], [["1", "2", "", "1"]])
    assert metrics == _ours(EchoTask(), ["1", "2", "", "1"], "1", (1, 2, 4))
    assert metrics["maj@4"] == 1.0 and metrics["pass@1"] == 0.5


# ---- lm-eval end to end on the embedded model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm():
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(EMBEDDED_MODEL_DIR).eval()
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL_DIR)
    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=64, device="cpu")


def _variant(tmp_path: Path, base: str, name: str, repeats: int) -> Path:
    """A task YAML that includes one of ours with fewer repeats (how a user makes a variant)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"include: {TASKS_DIR / base}\ntask: {name}\nrepeats: {repeats}\n")
    return path


def _run(lm, tmp_path, base, name, repeats, limit, **kwargs):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    _variant(tmp_path, base, name, repeats)
    manager = TaskManager(include_path=[str(TASKS_DIR), str(tmp_path)], metadata=kwargs.pop("metadata", None))
    return simple_evaluate(
        model=lm, tasks=[name], task_manager=manager, limit=limit, log_samples=True, bootstrap_iters=0, **kwargs
    )


def _check_against_our_functions(out, name, task, repeats, ks):
    samples = out["samples"][name]
    per_doc = {f"{m}@{k}": [] for m in ("pass", "maj") for k in ks}
    for sample in samples:
        (generations,) = sample["resps"]  # one request per document, holding all `repeats` generations
        assert len(generations) == repeats
        assert sample["filtered_resps"] == [generations]
        ours = _ours(task, generations, sample["doc"]["answer"], ks)
        for key, value in ours.items():
            assert sample[key] == value, (key, generations)  # exact, per document
            per_doc[key].append(value)
    results = out["results"][name]
    for key, values in per_doc.items():
        assert results[f"{key},all"] == sum(values) / len(values)  # lm-eval's mean of our per-document values
    return per_doc


def test_lm_eval_arithmetic_pass_and_maj_equal_our_functions_on_the_same_generations(lm, tmp_path):
    out = _run(lm, tmp_path, "grpo_ext_arithmetic.yaml", "grpo_ext_arithmetic_r4", 4, 8, metadata={"n": 8})
    per_doc = _check_against_our_functions(out, "grpo_ext_arithmetic_r4", ArithmeticTask(), 4, (1, 2, 4))
    assert len(per_doc["pass@1"]) == 8
    results = out["results"]["grpo_ext_arithmetic_r4"]
    assert "pass@8,all" not in results and "maj@16,all" not in results  # k > repeats is not reported
    # the trained embedded model solves some of them, so the comparison is not all zeros
    assert 0 < results["pass@4,all"] <= 1 and results["pass@1,all"] <= results["pass@4,all"]
    # the prompts are the embedded task's test prompts, sampled at temperature 1 until EOS
    config = out["configs"]["grpo_ext_arithmetic_r4"]
    assert config["generation_kwargs"]["temperature"] == 1.0 and config["generation_kwargs"]["do_sample"] is True
    assert [s["doc"]["prompt"] for s in out["samples"]["grpo_ext_arithmetic_r4"]] == ArithmeticTask().load("test", 8)[
        "prompt"
    ]


def test_lm_eval_gsm8k_runs_on_a_local_file(lm, tmp_path, monkeypatch):
    monkeypatch.setenv(utils.data_files_env("gsm8k"), str(GSM8K_FILE))
    out = _run(lm, tmp_path, "grpo_ext_gsm8k.yaml", "grpo_ext_gsm8k_r2", 2, 2, gen_kwargs={"max_gen_toks": 8})
    _check_against_our_functions(out, "grpo_ext_gsm8k_r2", GSM8KTask(), 2, (1, 2))
    docs = [s["doc"] for s in out["samples"]["grpo_ext_gsm8k_r2"]]
    assert [d["answer"] for d in docs] == ["405", "108"]
    assert docs[0]["prompt"].endswith("Answer:")
