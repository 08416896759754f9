"""transformers-responses: the complete OpenAI Responses API for `transformers serve`.

Importing this package is cheap on purpose: the interpreter start-up hook (`_startup`) imports it in every Python
process of the environment, so nothing here may import `transformers`, `torch` or even `importlib.metadata` eagerly.
"""


__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # `__version__` comes from the installed metadata, read on first use only (importlib.metadata costs milliseconds).
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("transformers-responses")
        except PackageNotFoundError:  # running from a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
