"""A local model folder's files agree with each other, checked before transformers, PEFT or tokenizers load them (a
`UserError` naming the file, where the libraries would end in a traceback, or worse, load something else silently):

- `check_weights` (what a loader calls on a local model folder): every safetensors file opens (a torn or truncated
  download is named), there are weights at all, and the two checks below; `check_tokenizer`: the folder holds a
  tokenizer, and `check_tokenizer_files`;
- `check_config_matches_weights`: every tensor `config.json` makes has the shape the weights file gives it, and none is
  missing from the file (transformers would stop on a size mismatch with a `RuntimeError`, and silently initialise a
  layer the file lacks at random: a config of 4 layers over weights of 2 loaded and was scored);
- `check_adapter_base`: a PEFT adapter's base is a model folder, not the adapter itself or another adapter, and its
  LoRA matrices fit the base's layers (PEFT ends in a wall of `size mismatch` lines);
- `check_tokenizer_files`: `tokenizer.json` and `tokenizer_config.json` parse and load (transformers ends in a
  `KeyError` or a `JSONDecodeError`); `check_chat_template`: the chat template compiles (a Jinja traceback).

Only the files' headers and configs are read (no weights), on the meta device. A folder whose layout these checks do
not understand (a quantised checkpoint, an architecture transformers does not know, keys renamed on load) is left to
the loader.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from grpo_ext.errors import UserError, user_file

__all__ = [
    "TOKENIZER_FILES",
    "TOKENIZER_MAIN_FILES",
    "chat_templates",
    "check_adapter_base",
    "check_chat_template",
    "check_config_matches_weights",
    "check_not_adapter",
    "check_tokenizer",
    "check_tokenizer_files",
    "check_weights",
    "weight_shapes",
]

#: The files a saved tokenizer is made of: what an export copies and a sample cache fingerprints.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)
#: Any one of these is enough for `AutoTokenizer` to start from (the others only add to one).
TOKENIZER_MAIN_FILES = TOKENIZER_FILES[:5]

#: Where PEFT keeps a LoRA matrix: ``base_model.model.<module>.lora_A.weight`` / ``lora_B``.
_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<which>[AB])(?:\.[^.]+)?\.weight$")


def weight_shapes(folder: Path, pattern: str = "*.safetensors") -> dict[str, tuple[tuple[int, ...], str]]:
    """Tensor name -> (shape, file name) of every safetensors file in ``folder`` matching ``pattern`` (headers only)."""
    from safetensors import safe_open

    shapes = {}
    for path in sorted(folder.glob(pattern)):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 - safe_open is no mapping
                shapes[key] = (tuple(handle.get_slice(key).get_shape()), path.name)
    return shapes


def _read_json(path: Path, what: str) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{what}: {path} is not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise UserError(f"{what}: {path} is not a JSON object")
    return value


def _meta_model(folder: Path, what: str):
    """The causal LM ``config.json`` describes, on the meta device; None when this check cannot build it here (remote
    code, a quantised checkpoint, a model that is not a causal LM: a reward model's head)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = _read_json(folder / "config.json", what)  # not JSON: named here
    if raw.get("quantization_config") or raw.get("auto_map"):
        return None  # packed quantised weights have shapes of their own; remote code is the loader's to run
    architectures = raw.get("architectures") or []
    if architectures and not all(str(a).endswith("ForCausalLM") for a in architectures):
        return None
    try:
        config = AutoConfig.from_pretrained(str(folder))
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, ImportError, AttributeError, OSError):  # the loader names what it is
        return None


def _ignored(key: str, patterns) -> bool:
    return any(re.search(p, key) for p in patterns or ())


def check_weights(folder: str | Path, what: str) -> None:
    """Every safetensors file of a local model folder opens (its header is whole and covers the file), else a
    `UserError` naming the file: a torn or truncated download, a disk that filled during a save. Reads only the
    headers. A folder with no weights at all is named too (with what was expected), and so are weights that disagree
    with `config.json` and an adapter that does not fit its base."""
    folder = Path(folder)
    if not folder.is_dir():
        return  # a hub id: the hub client checks its own downloads
    files = sorted(folder.glob("*.safetensors"))
    if not files:  # weights load as safetensors only (no pickle)
        raise UserError(
            f"{what}: {folder} has no weights (expected model.safetensors, model-*-of-*.safetensors or "
            "adapter_model.safetensors)"
        )
    from safetensors import safe_open

    for path in files:
        with user_file(path, what), safe_open(str(path), framework="pt"):
            pass
    check_config_matches_weights(folder, what)  # config.json's shapes are the weights' (no layer left random)
    check_adapter_base(folder, what)  # an adapter's base is another model folder, of the adapter's shapes


def check_tokenizer(folder: str | os.PathLike, what: str) -> None:
    """A local model folder holds a tokenizer (the files `save_pretrained` writes), else a `UserError` naming the
    folder: without one transformers fails deep inside with a message about sentencepiece or processors. Files that
    do not parse or load are named too (`check_tokenizer_files`)."""
    folder = Path(folder)
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_MAIN_FILES):
        raise UserError(
            f"{what}: {folder} has no tokenizer (expected one of {', '.join(TOKENIZER_MAIN_FILES)}); save it next to "
            "the model with tokenizer.save_pretrained(folder)"
        )
    check_tokenizer_files(folder, what)  # the files parse and load


def check_config_matches_weights(folder: str | Path, what: str) -> None:
    """Every tensor of the model ``config.json`` describes is in the weights with the same shape (see the module
    docstring); a `UserError` naming the first disagreement, the file and the config field that decides it."""
    folder = Path(folder)
    if not (folder / "config.json").is_file() or (folder / "adapter_config.json").is_file():
        return
    stored = weight_shapes(folder)
    if not stored:
        return  # check_weights names a folder without weights
    model = _meta_model(folder, what)
    if model is None:
        return
    expected = {key: tuple(t.shape) for key, t in model.state_dict().items()}
    prefix = f"{model.base_model_prefix}." if getattr(model, "base_model_prefix", "") else ""
    matched = {}
    for key in stored:
        for candidate in (key, prefix + key, key.removeprefix(prefix)):
            if candidate in expected:
                matched[candidate] = key
                break
    if len(matched) < len(stored) / 2:
        return  # keys renamed on load (an older layout): the loader maps them, and reports what it cannot
    for name, key in matched.items():
        shape, file = stored[key]
        if shape != expected[name]:
            raise UserError(
                f"{what}: {folder / 'config.json'} disagrees with the weights: {key} is {list(shape)} in {file}, the "
                f"config makes it {list(expected[name])} (check hidden_size, intermediate_size, vocab_size, heads)"
            )
    tied = set(getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or ())
    ignore = getattr(model, "_keys_to_ignore_on_load_missing", None)
    missing = [k for k in expected if k not in matched and k not in tied and not _ignored(k, ignore)]
    if missing:
        raise UserError(
            f"{what}: {folder / 'config.json'} disagrees with the weights: {len(missing)} tensors it makes are not in "
            f"the weights file (first: {missing[0]}; check num_hidden_layers): they would be initialised at random"
        )
    ignore = getattr(model, "_keys_to_ignore_on_load_unexpected", None)
    unexpected = [k for k in stored if k not in matched.values() and not _ignored(k, ignore)]
    if unexpected:
        raise UserError(
            f"{what}: {folder / 'config.json'} disagrees with the weights: {len(unexpected)} tensors of the weights "
            f"file are not in the model it makes (first: {unexpected[0]}; check num_hidden_layers): they would be "
            "dropped"
        )


def check_adapter_base(folder: str | Path, what: str, base_model: str | None = None) -> None:
    """A PEFT adapter folder's base (``base_model``, else its ``adapter_config.json``'s) is a model folder other than
    the adapter, and every LoRA matrix fits the base layer it adapts; a base that is a hub id is not checked."""
    from grpo_ext.model_paths import resolve_model_path

    folder = Path(folder)
    config_file = folder / "adapter_config.json"
    if (folder / "config.json").is_file() or not config_file.is_file():
        return
    base = base_model or _read_json(config_file, what).get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        return  # the loader names a missing base
    try:
        base_path = Path(resolve_model_path(base))
    except FileNotFoundError:
        return  # the loader names the missing base folder
    if not base_path.is_dir():
        return  # a hub id
    if base_path.resolve() == folder.resolve():
        raise UserError(f"{what}: {config_file} names the adapter itself as its base_model_name_or_path ({base})")
    if not (base_path / "config.json").is_file():
        raise UserError(
            f"{what}: {config_file} names {base} as its base, which is not a model folder (no config.json; another "
            "adapter?): give the model the adapter was trained on"
        )
    base_config = _read_json(base_path / "config.json", what)
    if base_config.get("quantization_config"):
        return  # packed quantised weights have shapes of their own
    base_shapes = weight_shapes(base_path)
    tied = base_config.get("tie_word_embeddings", True)
    for key, (shape, file) in weight_shapes(folder, "adapter_model*.safetensors").items():
        found = _LORA_KEY.match(key)
        if not found or len(shape) != 2:
            continue
        module = found["module"]
        target = base_shapes.get(f"{module}.weight")
        if target is None and module.endswith("lm_head") and tied:
            target = base_shapes.get(f"{module.rsplit('lm_head', 1)[0]}model.embed_tokens.weight")
        if target is None or len(target[0]) != 2:
            continue  # a module this check cannot find (renamed, quantised): PEFT names it
        out_features, in_features = target[0]
        if found["which"] == "A":
            side, size, wanted = "input", shape[1], in_features
        else:
            side, size, wanted = "output", shape[0], out_features
        if size != wanted:
            raise UserError(
                f"{what}: the adapter {folder} does not fit its base {base}: {key} in {file} has {side} size {size}, "
                f"the base's {module} has {wanted} (an adapter of another model)"
            )


def check_not_adapter(folder: str | Path, what: str) -> None:
    """GRPO starts from a model folder: a PEFT adapter folder (TRL reads its `config.json`, which an adapter lacks) is
    a `UserError` saying how to get one."""
    folder = Path(folder)
    if folder.is_dir() and (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
        raise UserError(
            f"{what}: {folder} is a PEFT adapter (adapter_config.json, no config.json): training starts from a model "
            "folder; merge the adapter into its base first (scripts/publish.py FOLDER --merge --dry-run) or train a "
            "new adapter on its base (use_peft: true)"
        )


def check_tokenizer_files(folder: str | Path, what: str) -> None:
    """The tokenizer files of a local folder parse and load; a `UserError` naming the file otherwise. (A chat template
    is checked where it is rendered: a folder whose prompts are plain text never reads it.)"""
    folder = Path(folder)
    if not folder.is_dir():
        return
    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        _read_json(config_file, what)
    tokenizer_file = folder / "tokenizer.json"
    if tokenizer_file.is_file():
        _read_json(tokenizer_file, what)
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(str(tokenizer_file))
        except Exception as err:  # noqa: BLE001 - tokenizers raises a bare Exception for a file it cannot read
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(
                f"{what}: {tokenizer_file} is not a tokenizer the tokenizers library can load ({reason})"
            ) from None


def check_chat_template(folder: str | Path, what: str) -> None:
    """Every chat template of a tokenizer folder compiles (a `UserError` naming the file otherwise). Training and the
    harness render their prompts before the first step or draw (`grpo_ext.prompt_fit`), which also finds what only
    rendering shows; publishing checks that the template a user of the model will render at least parses."""
    from jinja2 import TemplateError
    from transformers.utils.chat_template_utils import _compile_jinja_template

    for source, template in chat_templates(Path(folder)):
        try:
            _compile_jinja_template(template)
        except TemplateError as err:
            raise UserError(
                f"{what}: the chat template in {source} does not parse ({type(err).__name__}: {err})"
            ) from None


def chat_templates(folder: Path, config: dict | None = None) -> list[tuple[Path, str]]:
    """(file, template text) of every chat template a tokenizer folder holds (the file named where one is)."""
    templates = []
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        templates.append((jinja, jinja.read_text()))
    if config is None:
        path = folder / "tokenizer_config.json"
        config = _read_json(path, "tokenizer") if path.is_file() else {}
    value = config.get("chat_template")
    items = value if isinstance(value, list) else [{"template": value}] if value else []
    for item in items:
        text = item.get("template") if isinstance(item, dict) else None
        if isinstance(text, str):
            templates.append((folder / "tokenizer_config.json", text))
    return templates
