#!/usr/bin/env python3
"""An outside agent that joins a teamflow team as a member through MCP, with its token.

    teamflow member token my-team alice          # prints the token, once
    TEAMFLOW_TOKEN=tft_... python3 examples/mcp_agent.py --team my-team --name alice \\
        --work-dir /tmp/alice

It starts `teamflow mcp` itself (stdio, the token in its environment), or talks to a running
one over HTTP with `--url http://127.0.0.1:4310/mcp` (the token as `Authorization: Bearer`).
Then it loops, as a real agent (Claude Code, OpenCode, ...) would with the same tools:

1. `heartbeat`, then `read_inbox` (its own; anyone else's is refused);
2. a `shutdown_request`: answers `send_message(type="shutdown_response", approve=true)` and
   stops;
3. its task (a `task_assignment` in the inbox, or an open task it owns whose blockers are
   done, or an unassigned one it claims with `task_update(owner=itself)`; teamflow may have
   started the task's `team-task` run, which waits for this member's report):
   `task_update(status="in_progress")`;
4. when its plan mode requires it, `plan_request` and then `plan_status` until the lead
   decides (a denial: it revises the plan with the feedback and asks again);
5. the work, with a tool: it counts the words of the task's description and writes a
   report file into `--work-dir`;
6. `task_update(status="completed", result=...)` and a message to the lead.

It uses only the MCP Python SDK's client; any MCP client can do the same.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters


class Refused(Exception):
    """A tool error: the server's `001` envelope."""


class Agent:
    def __init__(self, client: Client, team: str, name: str, work_dir: Path) -> None:
        self.client, self.team, self.name, self.work_dir = client, team, name, work_dir
        self.done: list[str] = []

    async def call(self, tool: str, **arguments: Any) -> Any:
        result = await self.client.call_tool(tool, arguments)
        text = "".join(getattr(block, "text", "") for block in result.content)
        if result.is_error:
            raise Refused(text)
        data = result.structured_content
        if data is not None:
            return data["result"] if set(data) == {"result"} else data
        return json.loads(text)

    def say(self, line: str) -> None:
        print(f"{self.name}: {line}", flush=True)

    async def run(self, *, poll_s: float, max_s: float, once: bool) -> int:
        """Works until a shutdown request (0), or `max_s` passes (1), or, with `once`, its
        first task is done (0)."""
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            await self.call("heartbeat", status="idle")
            messages = await self.call("read_inbox", team_name=self.team, agent_name=self.name)
            for message in messages:
                if message.get("type") == "shutdown_request":
                    await self.shutdown(message)
                    return 0
            task = await self.next_task(messages)
            if task is not None:
                await self.work(task)
                if once:
                    return 0
                continue
            await anyio.sleep(poll_s)
        self.say("gave up waiting")
        return 1

    async def next_task(self, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The task to do now: given to it, or owned and pending, or free to claim."""
        given = [
            (m.get("payload") or {}).get("task_id")
            for m in messages
            if m.get("type") == "task_assignment"
        ]
        tasks = await self.call("task_list", team_name=self.team)
        status = {task["id"]: task["status"] for task in tasks}
        for task in tasks:
            if task["id"] in self.done or task["status"] not in ("pending", "in_progress"):
                continue
            if task["status"] == "in_progress" and task["owner"] != self.name:
                continue
            if any(status.get(b) != "completed" for b in task["blockedBy"]):
                continue  # it starts when its blockers are done
            if task["id"] in given or task["owner"] == self.name:
                return task
        for task in tasks:
            if task["status"] == "pending" and not task["owner"] and not task["blockedBy"]:
                try:
                    return await self.call(
                        "task_update", team_name=self.team, task_id=task["id"], owner=self.name
                    )
                except Refused:
                    continue  # another member took it first
        return None

    async def work(self, task: dict[str, Any]) -> None:
        self.say(f"working on {task['subject']}")
        await self.call(
            "task_update", team_name=self.team, task_id=task["id"], status="in_progress"
        )
        await self.call("heartbeat", status="thinking")
        if await self.plan_mode_required():
            approved = await self.get_approval(task)
            if not approved:
                await self.call(
                    "task_update",
                    team_name=self.team,
                    task_id=task["id"],
                    status="failed",
                    result="my plan was not approved",
                )
                self.done.append(task["id"])
                return
        await self.call("heartbeat", status="executing_tools")
        report = self.count_words(task)
        await self.call(
            "task_update",
            team_name=self.team,
            task_id=task["id"],
            status="completed",
            result=f"wrote {report.name}",
        )
        await self.call(
            "send_message",
            team_name=self.team,
            type="message",
            recipient=self.lead,
            content=f"Done: {task['subject']} ({report.name})",
            summary=f"done: {task['subject']}"[:80],
        )
        self.done.append(task["id"])
        self.say(f"completed {task['subject']}")

    def count_words(self, task: dict[str, Any]) -> Path:
        """The work's tool: a word count of the task, written as a report file."""
        text = f"{task['subject']}\n{task.get('description') or ''}"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        report = self.work_dir / f"{task['id']}.txt"
        report.write_text(f"{task['subject']}: {len(text.split())} words\n", encoding="utf-8")
        return report

    async def plan_mode_required(self) -> bool:
        config = await self.call("read_config", team_name=self.team)
        self.lead = config["leadAgentId"].split("@")[0]
        me = next(m for m in config["members"] if m["name"] == self.name)
        return bool(me.get("planModeRequired"))

    async def get_approval(self, task: dict[str, Any], attempts: int = 3) -> bool:
        plan = f"1. Count the words of '{task['subject']}'.\n2. Write the count to a file."
        revises = ""
        for _ in range(attempts):
            asked = await self.call(
                "plan_request",
                team_name=self.team,
                plan=plan,
                summary=f"plan for {task['subject']}",
                revises=revises,
            )
            state = asked
            while state["status"] == "pending":
                await self.call("heartbeat", status="idle")
                await anyio.sleep(0.5)
                state = await self.call("plan_status", request_id=asked["request_id"])
            self.say(f"plan {asked['request_id']} {state['status']}")
            if state["status"] == "approved":
                return True
            if state["status"] != "denied":
                return False
            plan += f"\n(revised: {state.get('feedback')})"
            revises = asked["request_id"]
        return False

    async def shutdown(self, message: dict[str, Any]) -> None:
        payload = message.get("payload") or json.loads(message["text"])
        request_id = payload.get("requestId") or payload.get("request_id")
        await self.call(
            "send_message",
            team_name=self.team,
            type="shutdown_response",
            request_id=request_id,
            approve=True,
        )
        self.say(f"approved shutdown {request_id}")

    lead = "team-lead"


def connect(args: argparse.Namespace, token: str):
    if args.url:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        return http, Client(streamable_http_client(args.url, http_client=http))
    command = args.teamflow.split()
    env = {**os.environ, "TEAMFLOW_TOKEN": token}
    server = StdioServerParameters(command=command[0], args=[*command[1:], "mcp"], env=env)
    return None, Client(server)


async def main(args: argparse.Namespace) -> int:
    token = os.environ.get("TEAMFLOW_TOKEN", "")
    if not token:
        print("mcp_agent: set TEAMFLOW_TOKEN (teamflow member token TEAM NAME)", file=sys.stderr)
        return 2
    http, client = connect(args, token)
    try:
        async with client:
            agent = Agent(client, args.team, args.name, Path(args.work_dir))
            return await agent.run(poll_s=args.poll, max_s=args.max_seconds, once=args.once)
    finally:
        if http is not None:
            await http.aclose()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--team", required=True)
    parser.add_argument("--name", required=True, help="This member's name (its token's).")
    parser.add_argument("--work-dir", default=".", help="Where the reports go.")
    parser.add_argument("--url", help="A `teamflow mcp --http` server (default: stdio).")
    parser.add_argument(
        "--teamflow",
        default=f"{sys.executable} -m flows.cli",
        help="How to start teamflow for stdio (default: this Python's).",
    )
    parser.add_argument("--poll", type=float, default=0.5, help="Seconds between inbox reads.")
    parser.add_argument("--max-seconds", type=float, default=600, help="Give up after this.")
    parser.add_argument("--once", action="store_true", help="Stop after the first task.")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse()))
