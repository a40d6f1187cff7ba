"""The docs' "Bring your own agent" example runs as written: a team built with the CLI
alone, its member's agent `examples/openai_agent.py` (the `command` runtime) asking an
OpenAI-compatible endpoint (the fake server, on a real socket), the task run on a real
Prefect server by a real `teamflow worker`, and the answer in `task show` and `log`.

Only the endpoint's port changes. `teamflow up` is what the page says to run; here the
helpers start the same things it does (migrations, a server, the deployments, a worker).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from cli_runner import subprocess_teamflow
from fakes.openai_server import FakeOpenAI
from prefect_server import ROOT, prefect_server, wait_until
from teamflow_workers import register_deployments, teamflow_workers

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

PAGE = ROOT / "docs" / "bring-your-own-agent.md"
HEADING = "## A team from nothing, with a local model"
PAGE_URL = "http://127.0.0.1:11434/v1"
ANSWER = "Q4 sales grew 12%, carried by widgets."
KEY = "sk-fake-key"


def section_lines() -> list[str]:
    """The section's bash block, one command a line (continuations joined)."""
    section = PAGE.read_text().split(f"\n{HEADING}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    block = re.sub(r"\\\n\s*", " ", block)
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_the_section_builds_a_team_from_nothing_with_the_cli() -> None:
    lines = section_lines()
    assert any(line.startswith("teamflow up") for line in lines)
    commands = [line for line in lines if not line.startswith(("export ", "teamflow up"))]
    assert commands[0].startswith("teamflow db upgrade")
    assert any("teamflow team create" in line for line in commands)
    assert any(
        "--runtime command" in line and "examples/openai_agent.py" in line for line in commands
    )
    assert any(line.startswith("teamflow task run") for line in commands)
    assert any(line.startswith("teamflow log") for line in commands)
    assert PAGE_URL in "\n".join(commands)


def test_the_section_runs_a_task_through_the_agent_and_a_worker(tmp_path: Path) -> None:
    home = tmp_path / "home"
    teamflow_env = {
        "TEAMFLOW_HOME": str(home),
        "TEAMFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'teamflow.db'}",
    }
    with FakeOpenAI(api_key=KEY) as fake, prefect_server(tmp_path) as server:
        fake.reply(
            json.dumps(
                {
                    "status": "SUCCESS",
                    "thoughts": [{"type": "DECISION", "content": "One line is enough."}],
                    "actions": [],
                    "stop": True,
                    "response": ANSWER,
                }
            )
        )
        env = {**server.env, **teamflow_env}
        env.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)

        def teamflow(args: list[str]) -> subprocess.CompletedProcess:
            return subprocess_teamflow(args, env, cwd=ROOT, timeout=120)

        # What `teamflow up` does before the page's commands: migrations, deployments, worker.
        assert teamflow(["db", "upgrade"]).returncode == 0
        register_deployments(server, tmp_path / "deploy.log")
        worker_env = {**teamflow_env, "OPENAI_API_KEY": KEY}  # the page's `export`
        with teamflow_workers(server, tmp_path, 1, env=worker_env):
            variables: dict[str, str] = {}
            outputs: dict[str, str] = {}
            for line in section_lines():
                if line.startswith(("export ", "teamflow up")):
                    continue  # done above, as `teamflow up` would
                target = None
                assigned = re.fullmatch(r"(\w+)=\$\((teamflow .*)\)(\s*#.*)?", line)
                if assigned:
                    target, line = assigned.group(1), assigned.group(2)
                line = line.replace(PAGE_URL, fake.base_url)
                for name, value in variables.items():
                    line = line.replace(f"${name}", value)
                args = shlex.split(line, comments=True)
                assert args[0] == "teamflow", line
                if args[1:3] == ["task", "show"]:
                    # The run is on the worker: wait until it has finished, as a user would.
                    def ended(args: list[str] = args) -> bool:
                        shown = teamflow([*args[1:], "--json"])
                        return json.loads(shown.stdout)["status"] in ("completed", "archived")

                    wait_until(ended, 180, "the task's run to end", interval=0.5)
                result = teamflow(args[1:])
                assert result.returncode == 0, f"{line}\n{result.stdout}{result.stderr}"
                if target:
                    variables[target] = result.stdout.strip()
                outputs[" ".join(args[1:3])] = result.stdout

    assert re.search(r"^status\s+completed$", outputs["task show"], re.M), outputs["task show"]
    assert ANSWER in outputs["log writers"], outputs["log writers"]
    assert "can_run      yes" in outputs["member show"]
    # The agent asked the endpoint as the page told it to: the model, the key, the task.
    (request,) = fake.requests
    assert request["body"]["model"] == "llama3.2"
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    sent = json.dumps(request["body"]["messages"])
    assert "You write one-line summaries." in sent
    assert "Summarise: Q4 sales grew 12%" in sent
    # The key is in no file teamflow wrote.
    for path in home.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
