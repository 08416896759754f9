"""The `transformers responses` subcommand: a terminal client for a Responses server, and the offline demo.

(No `from __future__ import annotations` here: the host CLI kit reads the annotations as live objects.)

`create` streams an answer as it arrives (reasoning dimmed, tool calls shown); `get`, `delete`, `cancel`, `items`
and `conversation` work on stored responses and conversations; `demo` builds the tiny local chat model once (cached,
with a progress bar) and serves it with the plugin on localhost — with `--once`, it answers one real request through
the openai SDK and exits.
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
    previous_response_id: Annotated[str | None, typer.Option(
        help="Continue from this stored response (the model sees that conversation).")] = None,
    conversation: Annotated[str | None, typer.Option(
        help="Add this turn to a conversation (conv_…), which the model sees as context.")] = None,
    store: Annotated[bool, typer.Option(help="Keep the response on the server (--no-store: keep nothing).")] = True,
    output_format: Annotated[str, typer.Option(
        "--format", help="`text`: stream the answer; `json`: print the final response object (also: --json).")] = "text",
) -> None:
    """Create a response and stream it to the terminal as it arrives; its id is printed (dimmed) at the end."""
    json_output = _check_format(output_format)
    url = _url(url)
    with _errors(url):
        client = _client(url)
        model = model or _default_model(client, url)
        kwargs: dict[str, Any] = {"model": model, "input": prompt, "store": store}
        for key, value in (("instructions", instructions), ("max_output_tokens", max_output_tokens),
                           ("previous_response_id", previous_response_id), ("conversation", conversation)):
            if value:
                kwargs[key] = value
        final = _stream(client, kwargs, echo=not json_output)
    if json_output:
        click.echo(json.dumps(final, indent=2))
    elif final.get("id") and store:
        click.echo(_style(f"[{final['id']}]", DIM), err=True)  # stdout stays the answer alone


URL_OPTION = Annotated[str | None, typer.Option(
    help=f"Base URL of the server's OpenAI API [default: $TRANSFORMERS_RESPONSES_URL or {DEFAULT_URL}].")]
FORMAT_OPTION = Annotated[str, typer.Option(
    "--format", help="`text`: a readable summary; `json`: the object as the server sent it (also: --json).")]


def _url(url: str | None) -> str:
    return url or os.environ.get("TRANSFORMERS_RESPONSES_URL") or DEFAULT_URL


def _check_format(output_format: str) -> bool:
    if output_format not in ("text", "json"):
        raise click.UsageError("--format must be `text` or `json`")
    return output_format == "json"


class _errors:
    """Turn connection and HTTP errors into one line that says what to do, and an exit status."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        import openai

        if isinstance(exc, openai.APIConnectionError):
            click.echo(f"Could not reach {self.url}. Start a server first: transformers serve --enable-responses "
                       "MODEL (or: transformers responses demo)", err=True)
            raise SystemExit(2) from None
        if isinstance(exc, openai.APIStatusError):
            click.echo(f"The server answered {exc.status_code}: {exc.message}", err=True)
            raise SystemExit(1) from None
        return False


def _dump(obj: Any) -> dict[str, Any]:
    return obj.model_dump(mode="json") if hasattr(obj, "model_dump") else obj


def _show_response(response: dict[str, Any], json_output: bool) -> None:
    if json_output:
        click.echo(json.dumps(response, indent=2))
        return
    click.echo(_style(f"{response['id']}  {response['status']}", BOLD))
    for item in response.get("output") or []:
        if item["type"] == "message":
            click.echo("".join(p.get("text", p.get("refusal", "")) for p in item["content"]))
        elif item["type"] == "reasoning":
            click.echo(_style("".join(p["text"] for p in item.get("content") or []), DIM))
        elif item["type"] == "function_call":
            click.echo(_style(f"→ {item['name']}({item['arguments']})", BOLD))
    if response.get("error"):
        click.echo(f"error: {response['error']['message']}", err=True)


def _item_line(item: dict[str, Any]) -> str:
    if item["type"] == "message":
        text = "".join(p.get("text", p.get("refusal", "")) for p in item["content"]
                       if isinstance(p, dict)) if isinstance(item["content"], list) else item["content"]
        return f"{item['id']}  {item['role']}: {text}"
    if item["type"] == "function_call":
        return f"{item['id']}  → {item['name']}({item['arguments']})"
    if item["type"] == "function_call_output":
        return f"{item['id']}  ← {item['output']}"
    return f"{item['id']}  {item['type']}"


def get(response_id: Annotated[str, typer.Argument(help="The response id (resp_…).")], url: URL_OPTION = None,
        output_format: FORMAT_OPTION = "text") -> None:
    """Show a stored response: its status and output."""
    json_output = _check_format(output_format)
    with _errors(_url(url)):
        _show_response(_dump(_client(_url(url)).responses.retrieve(response_id)), json_output)


def delete(response_id: Annotated[str, typer.Argument(help="The response id (resp_…).")],
           url: URL_OPTION = None) -> None:
    """Delete a stored response with its items (a running background response is cancelled first)."""
    with _errors(_url(url)):
        _client(_url(url)).responses.delete(response_id)
    click.echo(f"deleted {response_id}")


def cancel(response_id: Annotated[str, typer.Argument(help="The background response id (resp_…).")],
           url: URL_OPTION = None, output_format: FORMAT_OPTION = "text") -> None:
    """Cancel a background response; generation stops and it ends `cancelled`."""
    json_output = _check_format(output_format)
    with _errors(_url(url)):
        _show_response(_dump(_client(_url(url)).responses.cancel(response_id)), json_output)


def items(response_id: Annotated[str, typer.Argument(help="The response id (resp_…).")], url: URL_OPTION = None,
          limit: Annotated[int, typer.Option(help="How many items (1-100).")] = 20,
          order: Annotated[str, typer.Option(help="`asc` (oldest first) or `desc`.")] = "asc",
          output_format: FORMAT_OPTION = "text") -> None:
    """List a stored response's input items."""
    json_output = _check_format(output_format)
    with _errors(_url(url)):
        page = _dump(_client(_url(url)).responses.input_items.list(response_id, limit=limit, order=order))
    if json_output:
        click.echo(json.dumps(page, indent=2))
    else:
        for item in page["data"]:
            click.echo(_item_line(item))


def conversation(
    action: Annotated[str, typer.Argument(help="create | get | items | delete")],
    conversation_id: Annotated[str | None, typer.Argument(help="The conversation id (conv_…), except for create.")]
    = None,
    message: Annotated[list[str] | None, typer.Option(
        help="create: a first user message (repeat the option for several).")] = None,
    url: URL_OPTION = None,
    output_format: FORMAT_OPTION = "text",
) -> None:
    """Create a conversation, show it, list its items, or delete it."""
    json_output = _check_format(output_format)
    if action not in ("create", "get", "items", "delete"):
        raise click.UsageError("the action must be one of create, get, items, delete")
    if action != "create" and not conversation_id:
        raise click.UsageError(f"`conversation {action}` needs the conversation id")
    with _errors(_url(url)):
        convs = _client(_url(url)).conversations
        if action == "create":
            result = _dump(convs.create(items=[{"role": "user", "content": m} for m in message or []]))
        elif action == "get":
            result = _dump(convs.retrieve(conversation_id))
        elif action == "delete":
            result = _dump(convs.delete(conversation_id))
        else:
            result = _dump(convs.items.list(conversation_id, order="asc", limit=100))
    if json_output:
        click.echo(json.dumps(result, indent=2))
    elif action == "items":
        for item in result["data"]:
            click.echo(_item_line(item))
    elif action == "delete":
        click.echo(f"deleted {conversation_id}")
    else:
        click.echo(result["id"])


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
            elif kind in ("response.completed", "response.incomplete", "response.failed", "response.cancelled"):
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
    for command in (create, get, delete, cancel, items, conversation, demo):
        group.command(name=command.__name__)(command)
    return group


__all__ = ["cancel", "conversation", "create", "delete", "demo", "get", "items", "responses_group"]
