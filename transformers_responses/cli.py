"""The `transformers responses` subcommand: a terminal client for a Responses server, and the offline demo.

(No `from __future__ import annotations` here: the host CLI kit reads the annotations as live objects.)

`create` streams an answer as it arrives (reasoning dimmed, tool calls shown); `demo` builds the tiny local chat model
once (cached, with a progress bar) and serves it with the plugin on localhost — with `--once`, it answers one real
request through the openai SDK and exits.
"""


import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import click
import typer

GROUP_HELP = "Talk to an OpenAI Responses API server (transformers serve --enable-responses), or run the offline demo."

DEFAULT_URL = "http://localhost:8000/v1"
DIM, RESET, BOLD = "\033[2m", "\033[0m", "\033[1m"


def _style(text: str, code: str) -> str:
    return f"{code}{text}{RESET}" if sys.stdout.isatty() else text


def _client(url: str) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=url, api_key=os.environ.get("OPENAI_API_KEY", "-"), max_retries=0)


def _default_model(client: Any, url: str) -> str:
    models = [m.id for m in client.models.list().data]
    if not models:
        raise click.UsageError(f"the server at {url} lists no model; pass --model")
    return models[0]


def create(
    prompt: Annotated[str, typer.Argument(help="What to ask the model.")],
    model: Annotated[str | None, typer.Option(help="Model to use (default: the server's first listed model).")] = None,
    url: Annotated[str | None, typer.Option(
        help=f"Base URL of the server's OpenAI API [default: $TRANSFORMERS_RESPONSES_URL or {DEFAULT_URL}].")] = None,
    instructions: Annotated[str | None, typer.Option(help="System instructions for this request.")] = None,
    max_output_tokens: Annotated[int | None, typer.Option(help="Upper bound on generated tokens (>= 16).")] = None,
    # `--format` (not a `--json` flag): the host's CLI kit owns `--json` and rewrites it to `--format json` for us.
    output_format: Annotated[str, typer.Option(
        "--format", help="`text`: stream the answer; `json`: print the final response object (also: --json).")] = "text",
) -> None:
    """Create a response and stream it to the terminal as it arrives."""
    import openai

    if output_format not in ("text", "json"):
        raise click.UsageError("--format must be `text` or `json`")
    json_output = output_format == "json"
    url = url or os.environ.get("TRANSFORMERS_RESPONSES_URL") or DEFAULT_URL
    client = _client(url)
    try:
        model = model or _default_model(client, url)
        kwargs: dict[str, Any] = {"model": model, "input": prompt}
        if instructions:
            kwargs["instructions"] = instructions
        if max_output_tokens:
            kwargs["max_output_tokens"] = max_output_tokens
        final = _stream(client, kwargs, echo=not json_output)
    except openai.APIConnectionError:
        click.echo(f"Could not reach {url}. Start a server first: transformers serve --enable-responses MODEL "
                   "(or: transformers responses demo)", err=True)
        raise SystemExit(2) from None
    except openai.APIStatusError as exc:
        click.echo(f"The server answered {exc.status_code}: {exc.message}", err=True)
        raise SystemExit(1) from None
    if json_output:
        click.echo(json.dumps(final, indent=2))


def _stream(client: Any, kwargs: dict[str, Any], *, echo: bool) -> dict[str, Any]:
    """Print text as it arrives; return the final response as a dict."""
    final: dict[str, Any] = {}
    last = ""
    with client.responses.create(stream=True, **kwargs) as stream:
        for event in stream:
            kind = event.type
            if echo and kind == "response.reasoning_text.delta":
                print(_style(event.delta, DIM), end="", flush=True)
                last = "reasoning"
            elif echo and kind == "response.output_text.delta":
                if last == "reasoning":
                    print("\n")
                print(event.delta, end="", flush=True)
                last = "text"
            elif echo and kind == "response.output_item.done" and event.item.type == "function_call":
                if last:
                    print()
                print(_style(f"→ {event.item.name}({event.item.arguments})", BOLD), flush=True)
                last = ""
            elif kind == "error" and echo:
                print(f"\nerror: {event.message}", file=sys.stderr)
            elif kind in ("response.completed", "response.incomplete", "response.failed"):
                final = event.response.model_dump(mode="json")
                if echo and kind == "response.incomplete":
                    print(_style(f"\n[incomplete: {final['incomplete_details']['reason']}]", DIM), end="")
    if echo:
        print()
    return final


def demo(
    port: Annotated[int, typer.Option(help="Port to serve on (localhost only).")] = 8000,
    once: Annotated[bool, typer.Option(help="Answer one real request through the openai SDK, then stop.")] = False,
    continuous_batching: Annotated[bool, typer.Option(help="Serve with continuous batching.")] = False,
) -> None:
    """Build (once, cached) a tiny local chat model and serve it with the Responses API on localhost — offline."""
    from .fixture_model import build_fixture_model

    click.echo("Preparing the demo model (built once, then cached)…")
    path = build_fixture_model(progress=True)
    click.echo(f"Demo model: {path}")
    url = f"http://127.0.0.1:{port}/v1"
    if not once:
        click.echo(f"\nServing on {url} — try, in another terminal:\n"
                   f"  transformers responses create Hi --url {url}\n"
                   f"  python -c \"from openai import OpenAI; print(OpenAI(base_url='{url}', api_key='-')"
                   f".responses.create(model='{path}', input='Hi').output_text)\"\n")
        _serve(path, port, continuous_batching, block=True)
        return
    server = _serve(path, port, continuous_batching, block=False)
    try:
        _wait_ready(url)
        click.echo(f"\n$ transformers responses create Hi --url {url}")
        _stream(_client(url), {"model": str(path), "input": "Hi"}, echo=True)
    finally:
        server.kill_server()


def _serve(path: Path, port: int, continuous_batching: bool, *, block: bool) -> Any:
    from transformers.cli.serve import Serve

    from .seam import check_host, plugins_on_build

    check_host()
    with plugins_on_build({"enable_responses": True, "tool_call_parser": "auto"}):
        return Serve(force_model=str(path), host="127.0.0.1", port=port, device="cpu",
                     continuous_batching=continuous_batching, non_blocking=not block)


def _wait_ready(url: str, timeout: float = 120.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    health = url.rsplit("/v1", 1)[0] + "/health"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(health, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the demo server did not start within {timeout:.0f} s")


def responses_group() -> click.Group:
    """The `responses` command group, built the way the host builds its own commands (huggingface_hub's CLI kit)."""
    from huggingface_hub import typer_factory

    group = typer_factory(help=GROUP_HELP)
    group.command(name="create")(create)
    group.command(name="demo")(demo)
    return group


__all__ = ["create", "demo", "responses_group"]
