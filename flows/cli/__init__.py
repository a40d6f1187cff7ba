"""The `teamflow` command line, one module per noun (`team`, `member`, `msg`, `task`, ...).

`app` is the root Typer app (put together in `flows.cli.app`); `main` is the console script.
"""

from flows.cli.app import app, main

__all__ = ["app", "main"]
