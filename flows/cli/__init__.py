"""The `teamflow` command line, one module per noun (`team`, `member`, `msg`, `task`, ...).

`app` is the root Typer app (put together in `flows.cli.app`); `console` is the console script
(`main`, then a quick exit).
"""

from flows.cli.app import app, console, main

__all__ = ["app", "console", "main"]
