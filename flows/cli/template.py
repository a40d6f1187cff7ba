"""`teamflow template`: versioned LLM prompt templates (`000`): add, render, show, list.

Variables are written `{{name}}` in the text. Every check is the store's
(`models.prompt_template`): a variable the template needs and not given, a `--var` it does
not use, an unknown template or version are refused with one line that names them.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail

template_app = typer.Typer(
    help="Prompt templates (000), versioned: add, render, show, list.", no_args_is_help=True
)

TemplateId = Annotated[str, typer.Argument(metavar="ID", help="The template_id.")]
VersionOpt = Annotated[
    int | None, typer.Option("--version", metavar="N", help="This version (default: latest).")
]
VarsOpt = Annotated[
    list[str] | None,
    typer.Option("--var", metavar="NAME=VALUE", help="A variable's value (repeatable)."),
]


def parse_vars(given: list[str] | None) -> dict[str, str]:
    """`--var NAME=VALUE` options as a dict; one line and exit 1 for a malformed or repeated
    one (the value may hold `=`)."""
    values: dict[str, str] = {}
    for item in given or []:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            fail(f"--var {item!r} is not NAME=VALUE")
        name = name.strip()
        if name in values:
            fail(f"--var {name} is given twice")
        values[name] = value
    return values


@template_app.command("add")
def template_add(
    template_id: TemplateId,
    description: Annotated[str, typer.Option("--description", metavar="D", help="What for.")],
    text: Annotated[
        str, typer.Option("--template", metavar="TEXT", help="The prompt, {{name}} variables.")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Stores a new version of a template (1 for a new ID, else the latest + 1)."""
    from models.prompt_template import add_template

    made = add_template(template_id, description=description, template=text)
    if as_json:
        emit(made.to_wire())
        return
    names = ", ".join(made.variables) or "none"
    typer.echo(f"added template {made.template_id} v{made.version} (variables: {names})")


@template_app.command("render")
def template_render(
    template_id: TemplateId,
    variables: VarsOpt = None,
    version: VersionOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Prints the template with its variables filled in (every one must be given)."""
    from models.prompt_template import render

    rendered = render(template_id, parse_vars(variables), version=version)
    if as_json:
        emit(rendered.to_json())
    else:
        typer.echo(rendered.text)


@template_app.command("show")
def template_show(
    template_id: TemplateId, version: VersionOpt = None, as_json: JsonFlag = False
) -> None:
    """Shows one version of a template (with --json: the 000 LLM Prompt Template)."""
    from models.prompt_template import get_template

    found = get_template(template_id, version=version)
    if as_json:
        emit(found.to_wire())
        return
    names = ", ".join(found.variables) or "none"
    typer.echo(f"{found.template_id} v{found.version}: {found.description}")
    typer.echo(f"    variables: {names}; created {found.created_at:%Y-%m-%d %H:%M:%S}Z")
    typer.echo(found.template)


@template_app.command("list")
def template_list(as_json: JsonFlag = False) -> None:
    """Lists the templates, each at its latest version."""
    from models.prompt_template import list_templates

    found = list_templates()
    if as_json:
        emit([t.to_wire() for t in found])
        return
    for t in found:
        typer.echo(f"{t.template_id:<24} v{t.version:<4} {t.description}")
    if not found:
        typer.echo("no templates (add one with `teamflow template add ID ...`)")
