#!/usr/bin/env python3
"""The smallest agent for teamflow's `command` runtime: it answers every task at once.

teamflow runs it once per step with the step request (JSON) on stdin and reads one `002`
Chimera response (JSON) from stdout:

    teamflow member add q4-team analyst-1 --model haiku --prompt "..." \\
        --runtime command --command "python3 examples/echo_agent.py"

It needs nothing but Python's standard library. `examples/openai_agent.py` is the same
protocol with a language model behind it.
"""

import json
import sys


def main() -> None:
    request = json.load(sys.stdin)
    task = request.get("task") or {}
    answer = {
        "status": "SUCCESS",
        "thoughts": [{"type": "DECISION", "content": "An echo agent answers at once."}],
        "actions": [],
        "stop": True,
        "response": f"{request.get('agent_id')} received: {task.get('title', '(no title)')}",
    }
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
