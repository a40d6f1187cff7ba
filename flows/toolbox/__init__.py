"""The built-in tool programs and their `000` Tool Definitions (`*.json`).

Nothing here is imported by teamflow: each `*.py` is a program that `flows.tools` runs as a
separate process (`{python} {tools_dir}/NAME.py`, params as JSON on stdin), and the `*.json`
files are the definitions `teamflow tool add` and the demo install. It is a package so that
it is plainly part of `flows` and installs with it.
"""
