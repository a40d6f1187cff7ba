"""`python -m flows.cli ...` runs the `teamflow` command line."""

from flows.cli.app import console

console()
