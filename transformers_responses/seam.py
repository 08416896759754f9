"""The seam: the one place where the plugin touches the host's internals, version-checked.

What we rely on (checked by `check_host`, and by `tests/test_seam.py`, which fails loudly when any of it moves):

* `transformers.cli.serve.Serve` is the `serve` typer command, a class whose `__init__` parameters are its options, and
  it calls `transformers.cli.serving.server.build_server(model_manager, …, response_handler=…, generation_state=…)`
  through the module attribute at call time;
* the host's app routes `POST /v1/responses`, which we remove;
* `transformers.cli.serving.utils` provides `BaseHandler` (`_resolve_model`, `_build_generation_config`),
  `GenerationState.get_manager/use_continuous_batching`, managers whose `generate_streaming(…, response_parser=…)`
  feed every decoded chunk (special tokens kept) to the parser, and the `_StreamError` sentinel;
* `CBGenerateManager.init_cb` is "create `_cb` with `model.init_continuous_batching(…, _cb_config)`, then start it":
  `start_cb` does the same with a hook in between (where the grammar router joins the CB's logits processors).

Only `--enable-responses` activates the patch: without it `Serve` runs untouched. With it, `build_server` is wrapped
for the duration of that `Serve` call so that, once the host app is built, every plugin of entry-point group
`transformers.serve` is called with the app and the host's model manager and generation state.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Annotated, Any

logger = logging.getLogger("transformers_responses")

TESTED_HOST = ((5, 24),)  # transformers major.minor versions this seam was tested against
SERVE_GROUP = "transformers.serve"
HELP_PANEL = "Responses API (transformers-responses)"


class HostIncompatibleError(RuntimeError):
    """The installed transformers moved something this plugin relies on."""


def host_version() -> tuple[int, int]:
    import transformers

    major, minor = (int(p) for p in transformers.__version__.split(".")[:2])
    return major, minor


def check_host() -> None:
    """Fail loudly, with what to do, if the host internals listed in the module docstring are not as expected."""
    from transformers.cli import serve as serve_module
    from transformers.cli.serving import server, utils

    problems = []
    params = inspect.signature(server.build_server).parameters
    for name in ("model_manager", "response_handler", "generation_state"):
        if name not in params:
            problems.append(f"build_server() has no parameter {name!r}")
    for cls, attrs in ((utils.BaseHandler, ("_resolve_model", "_build_generation_config", "chat_template_kwargs")),
                       (utils.GenerationState, ("get_manager", "use_continuous_batching"))):
        for attr in attrs:
            if attr != "chat_template_kwargs" and not hasattr(cls, attr):
                problems.append(f"{cls.__name__}.{attr} is missing")
    if "response_parser" not in inspect.signature(utils.BaseGenerateManager.generate_streaming).parameters:
        problems.append("generate_streaming() takes no response_parser")
    init_cb = inspect.getsource(utils.CBGenerateManager.init_cb)
    if "init_continuous_batching" not in init_cb or "_cb_config" not in init_cb or ".start()" not in init_cb:
        problems.append("CBGenerateManager.init_cb no longer creates then starts `_cb`")
    if not hasattr(utils, "_StreamError"):
        problems.append("transformers.cli.serving.utils._StreamError is missing")
    if "build_server" not in inspect.getsource(serve_module.Serve.__init__):
        problems.append("Serve no longer calls build_server")
    if problems:
        raise HostIncompatibleError(
            f"transformers {'.'.join(map(str, host_version()))} is not compatible with this transformers-responses "
            f"release ({'; '.join(problems)}). Install a tested transformers: "
            f"pip install 'transformers>={TESTED_HOST[0][0]}.{TESTED_HOST[0][1]},<{TESTED_HOST[-1][0]}.{TESTED_HOST[-1][1] + 1}'.")
    if host_version() not in TESTED_HOST:
        logger.warning("transformers %s was not tested with transformers-responses; the seam checks passed.",
                       ".".join(map(str, host_version())))


def start_cb(manager: Any, model: Any, gen_config: Any, before_start: Callable[[Any], None]) -> None:
    """The host's `CBGenerateManager.init_cb`, with `before_start(cb)` run between creating the CB and starting it."""
    if manager._cb is not None:
        return
    manager._cb = model.init_continuous_batching(generation_config=gen_config,
                                                 continuous_batching_config=manager._cb_config)
    before_start(manager._cb)
    manager._cb.start()


def stream_error_type() -> type:
    from transformers.cli.serving.utils import _StreamError

    return _StreamError


# ---- the serve command ----


def _plugin_parameters() -> list[inspect.Parameter]:
    import typer

    from .tool_parsers import BUILTIN

    def opt(name: str, default: Any, annotation: Any, help_text: str) -> inspect.Parameter:
        option = typer.Option(help=f"[{HELP_PANEL}] {help_text}")
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=Annotated[annotation, option])

    return [
        opt("enable_responses", False, bool,
            "Serve the complete OpenAI Responses API on /v1/responses (transformers-responses) instead of the "
            "built-in handler."),
        opt("tool_call_parser", "auto", str,
            f"Tool-call syntax of the model: auto (from the chat template) or one of {', '.join(sorted(BUILTIN))}, "
            "or a plugin's name."),
        opt("responses_store", "", str,
            "Where responses and conversations are kept: sqlite:///path.db (default: responses.db under the Hugging "
            "Face cache), memory:// (bounded, lost at exit) or redis://host:port/db (shared by several replicas)."),
        opt("responses_ttl", "30d", str,
            "How long stored responses are kept: seconds, or a number with s, m, h or d (e.g. 12h, 30d); 0 keeps "
            "them forever."),
    ]


PLUGIN_OPTIONS = ("enable_responses", "tool_call_parser", "responses_store", "responses_ttl")


def patch_serve_command(app: Any) -> None:
    """Re-register the host's `serve` command with our options added; `Serve` itself is unchanged.

    The host app is a huggingface_hub `HfGroup` that builds click commands from annotated signatures, so the new
    command is built by the same `app.command` from the host's own parameters plus ours.
    """
    command = getattr(app, "commands", {}).get("serve")
    if command is None or not hasattr(app, "command"):
        raise HostIncompatibleError("the host CLI has no `serve` command to extend")
    host_serve: Callable[..., Any] = inspect.unwrap(command.callback)
    host_params = list(inspect.signature(host_serve).parameters.values())

    def serve(**kwargs: Any) -> Any:
        options = {name: kwargs.pop(name) for name in PLUGIN_OPTIONS}
        if not options["enable_responses"]:
            return host_serve(**kwargs)
        check_host()
        from .store import parse_ttl

        options["responses_ttl"] = parse_ttl(options["responses_ttl"])
        with plugins_on_build(options):
            return host_serve(**kwargs)

    serve.__signature__ = inspect.Signature([*host_params, *_plugin_parameters()])  # type: ignore[attr-defined]
    serve.__doc__ = host_serve.__doc__
    app.command(name="serve")(serve)


@contextlib.contextmanager
def plugins_on_build(options: dict[str, Any]) -> Iterator[None]:
    """While active, the host's `build_server` also runs the `transformers.serve` plugins on the app it builds."""
    from transformers.cli.serving import server

    original = server.build_server

    def build_server(model_manager: Any, *args: Any, **kwargs: Any) -> Any:
        app = original(model_manager, *args, **kwargs)
        response_handler = kwargs.get("response_handler")
        run_serve_plugins(
            app,
            model_manager=model_manager,
            generation_state=kwargs.get("generation_state"),
            chat_template_kwargs=getattr(response_handler, "chat_template_kwargs", {}) or {},
            options=options,
        )
        return app

    server.build_server = build_server
    try:
        yield
    finally:
        server.build_server = original


def run_serve_plugins(app: Any, **context: Any) -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=SERVE_GROUP):
        ep.load()(app, **context)


def add_lifespan(app: Any, startup: Callable[[], Any], shutdown: Callable[[], Any]) -> None:
    """Run `startup` before and `shutdown` after the host's own lifespan (Starlette's `router.lifespan_context`)."""
    host_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app_: Any) -> Any:
        await startup()
        try:
            async with host_lifespan(app_) as state:
                yield state
        finally:
            await shutdown()

    app.router.lifespan_context = lifespan


def remove_route(app: Any, path: str, method: str) -> None:
    """Drop the host's route for `method path` so ours answers it."""
    app.router.routes[:] = [
        r for r in app.router.routes
        if not (getattr(r, "path", None) == path and method in (getattr(r, "methods", None) or ()))
    ]
