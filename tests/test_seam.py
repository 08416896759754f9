"""The seam: fails loudly if the host internals we rely on move; the serve patch is scoped and reversible."""

from __future__ import annotations

import inspect

import typer
from typer.testing import CliRunner

from transformers_responses import seam


def test_host_internals_are_where_we_expect() -> None:
    seam.check_host()
    assert seam.host_version() in seam.TESTED_HOST


def test_patched_serve_keeps_host_options_and_adds_ours() -> None:
    from transformers.cli.serve import Serve

    app = typer.Typer()
    app.command(name="serve")(Serve)
    app.command(name="other")(lambda: None)
    seam.patch_serve_command(app)
    callback = next(c for c in app.registered_commands if c.name == "serve").callback
    params = inspect.signature(callback).parameters
    assert set(inspect.signature(Serve).parameters) < set(params)
    assert set(seam.PLUGIN_OPTIONS) <= set(params)
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
