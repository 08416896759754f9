"""The seam: fails loudly if the host internals we rely on move; the serve patch is scoped and reversible."""

from __future__ import annotations

import inspect

from click.testing import CliRunner
from huggingface_hub import typer_factory

from transformers_responses import seam


def test_host_internals_are_where_we_expect() -> None:
    seam.check_host()
    assert seam.host_version() in seam.TESTED_HOST


def test_patched_serve_keeps_host_options_and_adds_ours() -> None:
    from transformers.cli.serve import Serve

    app = typer_factory(help="host")
    app.command(name="serve")(Serve)
    host_options = {p.name for p in app.commands["serve"].params}
    seam.patch_serve_command(app)
    options = {p.name for p in app.commands["serve"].params}
    assert host_options < options and set(seam.PLUGIN_OPTIONS) <= options
    assert inspect.unwrap(app.commands["serve"].callback).__name__ == "serve"
    result = CliRunner().invoke(app, ["serve", "--help"])
    assert result.exit_code == 0 and "--enable-responses" in result.output and "--tool-call-parser" in result.output


def test_build_server_patch_is_scoped() -> None:
    from transformers.cli.serving import server

    original = server.build_server
    with seam.plugins_on_build({"enable_responses": True}):
        assert server.build_server is not original
    assert server.build_server is original


def test_remove_route_only_removes_that_route() -> None:
    from fastapi import FastAPI

    app = FastAPI()
    app.post("/v1/responses")(lambda: None)
    app.get("/v1/responses")(lambda: None)
    app.post("/v1/chat/completions")(lambda: None)
    seam.remove_route(app, "/v1/responses", "POST")
    routes = {(r.path, m) for r in app.router.routes for m in getattr(r, "methods", ())}
    assert ("/v1/responses", "POST") not in routes
    assert ("/v1/responses", "GET") in routes and ("/v1/chat/completions", "POST") in routes
