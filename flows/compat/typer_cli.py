"""teamflow's uses of Typer's internals (0.29.2, which vendors click as `typer._click`), for a
CLI that imports a command's module only when the command runs (`flows.cli.app`).

Each function or class is a patch (`flows.compat.PATCHES` lists it with the fingerprints of
what it leans on; `tests/test_compat.py` fails when that changes): re-check it when Typer
moves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from typer.core import TyperGroup

if TYPE_CHECKING:
    from typer._click.exceptions import ClickException, NoArgsIsHelpError


class _LazyCommands(MutableMapping):
    """A group's commands, each built by `build(name)` on first use; `names()` lists them in
    the order `--help` shows them (then any added later)."""

    def __init__(
        self, built: dict, names: Callable[[], list[str]], build: Callable[[str], Any]
    ) -> None:
        self.built = built
        self.names = names
        self.build = build

    def __getitem__(self, name: str) -> Any:
        if name not in self.built:
            if name not in self.names():
                raise KeyError(name)
            self.built[name] = self.build(name)
        return self.built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        del self.built[name]

    def __iter__(self) -> Iterator[str]:
        known = self.names()
        yield from known
        yield from (name for name in self.built if name not in known)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def lazy_group(names: Callable[[], list[str]], build: Callable[[str], Any]) -> type[TyperGroup]:
    """A `TyperGroup` class whose commands are built on first use (`_LazyCommands`).

    Written against Typer 0.29.2: `TyperGroup` keeps its commands in `self.commands`, and
    reads it only through the mapping protocol (`get_command`, `list_commands`, the
    suggestions of `resolve_command`). Without it, `teamflow msg send` imports and builds
    every command module (about 0.3 s more at each start, issue 16). Upstream: not reported
    (click's documented "lazily loading subcommands" recipe overrides `get_command` and
    `list_commands`; Typer has no hook for it).
    """

    class LazyGroup(TyperGroup):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.commands = _LazyCommands(dict(self.commands), names, build)

    return LazyGroup


def group_command(typer_app: Any, name: str, root: Any) -> Any:
    """The click group of `typer_app` under `name`, as `root.add_typer` would build it.

    Written against Typer 0.29.2: `typer.main.get_group_from_info` and `TyperInfo` are
    what `typer.main.get_command` uses inside; they are not documented. Without it, a
    group cannot be built on its own, only with the whole app. Upstream: not reported.
    """
    from typer.main import get_group_from_info
    from typer.models import TyperInfo

    return get_group_from_info(
        TyperInfo(typer_app, name=name),
        pretty_exceptions_short=root.pretty_exceptions_short,
        rich_markup_mode=root.rich_markup_mode,
        suggest_commands=root.suggest_commands,
    )


def function_command(function: Callable[..., Any], name: str | None, root: Any) -> Any:
    """The click command of `function` (named `name`, None: after the function), as
    `root.command(name)(function)` would build it.

    Written against Typer 0.29.2: `typer.main.get_command_from_info` and
    `Typer.registered_commands` are undocumented. Without it, a command cannot be built on
    its own. Upstream: not reported.
    """
    import typer
    from typer.main import get_command_from_info

    holder = typer.Typer()
    holder.command(name)(function)
    return get_command_from_info(
        holder.registered_commands[0],
        pretty_exceptions_short=root.pretty_exceptions_short,
        rich_markup_mode=root.rich_markup_mode,
    )


def usage_errors() -> tuple[type[ClickException], type[NoArgsIsHelpError]]:
    """Typer's usage error and its "no arguments: help printed" error, as raised by an app
    called with `standalone_mode=False`: `(ClickException, NoArgsIsHelpError)`.

    Written against Typer 0.29.2, which vendors click as the private `typer._click` (and
    raises its exceptions, not `click`'s). Without it, a bad command line prints a
    traceback instead of one line and exit code 2. Upstream: not reported (Typer does not
    re-export these).
    """
    from typer._click.exceptions import ClickException, NoArgsIsHelpError

    return ClickException, NoArgsIsHelpError
