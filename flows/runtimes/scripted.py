"""The `scripted` runtime: plays a playbook of Chimera responses, one per step.

Deterministic, and the default: the demo and the tests use it. A playbook is a list of `002`
Chimera response templates; step N (counted as the assistant steps the conversation already
holds) plays entry N. The member's runtime config gives it inline or as a JSON file (a list,
or an object with a `playbook` list):

    {"kind": "scripted", "playbook": [{...}, {...}]}
    {"kind": "scripted", "playbook": "/path/to/playbook.json"}

Strings in a template may hold placeholders, filled when the step is played:

    {sales_path}  {params.sales_path}     the task's `params`
    {task.title}  {task.id}               the task
    {team} {member} {agent_id} {model}    who is stepping
    {result.analyze_sales.top_trends}     the latest result of a tool (from `tool:` messages
                                          of the conversation or `tool_result` inbox entries);
                                          `{result.analyze_sales}` is the whole result object
    {inbox.plan_approval_response.feedback}   the latest unread inbox entry of that type
                                          (its JSON text, or the entry itself)

A plan the lead denies is revised by the config's `on_denial` step (in a playbook file, the
object's `on_denial`): the step after a denial plays it instead of the next entry, and the
playbook goes on where it was once a plan is approved. Its placeholders see the denial:

    {denial.feedback}  {denial.requestId}  {denial.revision}   the latest denied plan

    {"kind": "scripted", "playbook": [...], "on_denial": {"actions": [
        {"action": "request_plan_approval", "type": "internal",
         "params": {"plan": "...revised: {denial.feedback}", "summary": "..."}}], ...}}

Without `on_denial`, step N plays entry N whatever was decided.

A member that works on several tasks can have a playbook per task: `tasks` maps a task's
title to the playbook played for it (each task is a conversation of its own, so it starts
at its entry 1); a task whose title is not there plays `playbook`:

    {"kind": "scripted", "playbook": [...], "tasks": {"Q1 planning brief": [...]}}

Paths go into objects by key and into lists by position (`top_trends.0.product`). In an
action's `params`, a string that is only one placeholder takes the value as it is (a list
stays a list, a number a number); everywhere else a value is written as text: a list of
strings as one `- item` line each, other non-strings as JSON. `{{` and `}}` are literal
braces. The runtime never computes an answer: work is done by the tools its actions name,
which the flow runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.runtimes import (
    TOOL_USER_PREFIX,
    ResultPending,
    StepError,
    StepRequest,
    StepResult,
    parse_chimera,
    tool_results,
)
from models.conversation import ConversationRole
from models.limits import LimitError, loads_json, read_capped
from models.tool import ToolResult, ToolResultStatus

_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_][\w-]*(?:\.[\w-]+)*)\}")
_WHO = ("team", "member", "agent_id", "model")


@dataclass(frozen=True)
class ScriptedRuntime:
    """Plays `playbook` entry N at step N (see the module docstring)."""

    playbook: tuple[dict[str, Any], ...]
    source: str = "inline playbook"
    on_denial: dict[str, Any] | None = None
    tasks: tuple[tuple[str, tuple[dict[str, Any], ...]], ...] = ()
    """Per task title, the playbook played for that task instead of `playbook`."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ScriptedRuntime:
        """The runtime for `{"kind": "scripted", "playbook": [...] | "file.json"}`.

        Raises `ValueError` when the playbook file cannot be read or is not a list of objects.
        A config without a playbook is accepted; stepping it raises a `StepError` saying so.
        """
        playbook = config.get("playbook", [])
        on_denial = config.get("on_denial")
        tasks = config.get("tasks")
        source = "inline playbook"
        if isinstance(playbook, str):
            source = f"playbook {playbook}"
            data = _read_playbook(Path(playbook).expanduser())
            playbook = data.get("playbook") if isinstance(data, dict) else data
            if isinstance(data, dict):
                on_denial = data.get("on_denial") if on_denial is None else on_denial
                tasks = data.get("tasks") if tasks is None else tasks
        if not _is_playbook(playbook):
            raise ValueError(f"{source}: a playbook is a list of Chimera response objects")
        if on_denial is not None and not isinstance(on_denial, dict):
            raise ValueError(f"{source}: on_denial is one Chimera response object")
        tasks = tasks or {}
        if not isinstance(tasks, dict) or not all(_is_playbook(p) for p in tasks.values()):
            raise ValueError(f"{source}: tasks maps task titles to playbooks (lists of objects)")
        return cls(
            playbook=tuple(playbook),
            source=source,
            on_denial=on_denial,
            tasks=tuple((str(title), tuple(p)) for title, p in tasks.items()),
        )

    def _playbook_for(self, request: StepRequest) -> tuple[str, tuple[dict[str, Any], ...]]:
        """The playbook for the request's task (by title), and how to name it in errors."""
        title = (request.task or {}).get("title")
        for name, playbook in self.tasks:
            if name == title:
                return f"{self.source} for task {title!r}", playbook
        return self.source, self.playbook

    def step(self, request: StepRequest) -> StepResult:
        """The next playbook entry, filled in; `StepError` when there is none or it does not
        fill into a valid Chimera response, `ResultPending` when a tool result it uses has
        not arrived yet."""
        source, playbook = self._playbook_for(request)
        if not playbook:
            raise StepError(
                f"member {request.agent_id} has no playbook: set its runtime with "
                f"teamflow member set {request.team} {request.member} --runtime ... "
                "(command, openai, or scripted --playbook FILE)"
            )
        number = request.steps_taken
        if self.on_denial is not None:
            revised, denial = _denials(request)
            if denial is not None:
                where = f"{self.source} on_denial step"
                filled = _fill_step(self.on_denial, _Values(request, where, denial))
                return StepResult(response=parse_chimera(filled, source=where), tokens=0)
            number -= revised  # revisions are played besides the playbook's entries
        if number >= len(playbook):
            raise StepError(
                f"{source} has {len(playbook)} steps and all were played; "
                f"member {request.agent_id} was asked for step {number + 1}"
            )
        where = f"{source} step {number + 1}"
        values = _Values(request, where)
        filled = _fill_step(playbook[number], values)
        # Scripted steps ask no model, so they cost no tokens.
        return StepResult(response=parse_chimera(filled, source=where), tokens=0)


def _is_playbook(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(step, dict) for step in value)


def _read_playbook(path: Path) -> Any:
    try:
        data = loads_json(read_capped(path).decode("utf-8"), what=f"playbook {path}")
    except LimitError:
        raise
    except FileNotFoundError:
        raise ValueError(f"playbook {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"playbook {path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"playbook {path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    return data


PLAN_ACTION = "request_plan_approval"


def _denials(request: StepRequest) -> tuple[int, dict[str, Any] | None]:
    """How many denied plans were answered by a step already, and the denial (the
    `plan_approval_response`) the next step must answer, if any."""
    answered, waiting = 0, None
    for message in request.conversation:
        if message.role is ConversationRole.ASSISTANT:
            if waiting is not None:
                answered, waiting = answered + 1, None
            continue
        content = message.content
        if getattr(content, "userid", "") != f"{TOOL_USER_PREFIX}{PLAN_ACTION}":
            continue
        found = tool_results([message]).get(PLAN_ACTION)
        decision = (found.result or {}) if found is not None else {}
        waiting = decision if decision.get("status") == "denied" else None
    return answered, waiting


class _Values:
    """What placeholders resolve to for one step."""

    def __init__(
        self, request: StepRequest, where: str, denial: dict[str, Any] | None = None
    ) -> None:
        self.request = request
        self.where = where
        self.denial = denial
        self.results: dict[str, ToolResult] = tool_results(request.conversation, request.inbox)

    def get(self, path: str) -> Any:
        parts = path.split(".")
        head, rest = parts[0], parts[1:]
        task = self.request.task or {}
        params = task.get("params") or {}
        if head == "result" and rest:
            return self._result(path, rest)
        if head == "denial":
            if self.denial is None:
                raise StepError(f"{self.where} uses {{{path}}}, but no plan was denied")
            return self._walk(path, self.denial, rest)
        if head == "inbox" and rest:
            return self._walk(path, self._inbox(path, rest[0]), rest[1:])
        if head == "task":
            return self._walk(path, task, rest)
        if head == "params":
            return self._walk(path, params, rest)
        if head in _WHO and not rest:
            return getattr(self.request, head)
        if head in params:
            return self._walk(path, params[head], rest)
        raise StepError(
            f"{self.where}: {{{path}}} is not a task param, and no task, result, inbox or "
            f"member value (params given: {', '.join(sorted(params)) or 'none'})"
        )

    def _result(self, path: str, rest: list[str]) -> Any:
        # Tool ids may hold dots: take the longest name that has a result.
        for size in range(len(rest), 0, -1):
            name = ".".join(rest[:size])
            if name in self.results:
                result = self.results[name]
                if result.status is ToolResultStatus.FAILURE:
                    raise StepError(
                        f"{self.where} uses {{{path}}}, but tool {name} failed: "
                        f"{result.error_message}"
                    )
                return self._walk(path, result.result or {}, rest[size:])
        raise ResultPending(
            rest[0], f"{self.where} uses {{{path}}}, but no result of tool {rest[0]} has arrived"
        )

    def _inbox(self, path: str, kind: str) -> Any:
        for entry in reversed(self.request.inbox):
            if entry.get("type") == kind:
                if isinstance(entry.get("payload"), dict):
                    return entry["payload"]
                try:
                    parsed = json.loads(entry.get("text") or "")
                except ValueError:
                    return entry
                return parsed if isinstance(parsed, dict) else entry
        raise StepError(f"{self.where} uses {{{path}}}, but the inbox has no {kind} message")

    def _walk(self, path: str, value: Any, keys: list[str]) -> Any:
        for key in keys:
            if isinstance(value, dict) and key in value:
                value = value[key]
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                raise StepError(f"{self.where}: {{{path}}} has no {key!r}")
        return value


def _fill_step(template: dict[str, Any], values: _Values) -> dict[str, Any]:
    filled = {k: _fill(v, values, raw=False) for k, v in template.items() if k != "actions"}
    actions = template.get("actions")
    if isinstance(actions, list):
        # Params take values as they are; the Chimera fields around them are text.
        filled["actions"] = [
            {k: _fill(v, values, raw=k == "params") for k, v in action.items()}
            if isinstance(action, dict)
            else action
            for action in actions
        ]
    elif "actions" in template:
        filled["actions"] = actions
    return {k: filled[k] for k in template}


def _fill(template: Any, values: _Values, *, raw: bool) -> Any:
    if isinstance(template, dict):
        return {key: _fill(value, values, raw=raw) for key, value in template.items()}
    if isinstance(template, list):
        return [_fill(item, values, raw=raw) for item in template]
    if not isinstance(template, str):
        return template
    whole = _TOKEN.fullmatch(template)
    if raw and whole and whole.group(1):
        return values.get(whole.group(1))

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "{{":
            return "{"
        if match.group(0) == "}}":
            return "}"
        return _as_text(values.get(match.group(1)))

    return _TOKEN.sub(replace, template)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "\n".join(f"- {v}" for v in value)
    return json.dumps(value, ensure_ascii=False)
