"""Tools run for real: `000` Tool Definitions executed as real processes, their Feedback kept,
their `001` ToolResult given back; the built-in analysis tools on real CSV files; resource
access; the tool store and the `teamflow tool` commands."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cli_runner import teamflow as run_teamflow
from sqlmodel import Session

from flows.demo_data import write_all
from flows.tools import (
    BUILTIN_TOOLS_DIR,
    builtin_tools,
    check_access,
    install_builtin_tools,
    load_tool_file,
    record_feedback,
    run_tool,
)
from models.tool import (
    ToolDefinition,
    ToolError,
    ToolResultStatus,
    add_tool,
    get_feedback,
    get_tool,
    list_tools,
)

SUCCESS, FAILURE = ToolResultStatus.SUCCESS, ToolResultStatus.FAILURE


def tool(
    command: str,
    *,
    tool_id: str = "probe",
    kind: str = "script",
    properties: dict[str, Any] | None = None,
    required: list[str] | None = None,
    output_schema: dict[str, Any] | None = None,
) -> ToolDefinition:
    return ToolDefinition.model_validate(
        {
            "tool_id": tool_id,
            "type": kind,
            "description": "a tool written by the test",
            "command": command,
            "input_schema": {
                "type": "object",
                "properties": properties or {},
                "required": required or [],
            },
            "output_schema": output_schema or {"type": "object"},
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )


def program(tmp_path: Path, name: str, body: str) -> Path:
    """A Python program in tmp, run as `{python} PATH`."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def builtin(tool_id: str) -> ToolDefinition:
    return next(t for t in builtin_tools() if t.tool_id == tool_id)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has finished


# --- running script tools ------------------------------------------------------------------


def test_params_arrive_on_stdin_and_as_argv_placeholders_and_json_stdout_is_the_result(
    tmp_path: Path,
) -> None:
    echo = program(
        tmp_path,
        "echo.py",
        """
        import json, sys
        params = json.load(sys.stdin)
        print("working", file=sys.stderr)
        print(json.dumps({"argv": sys.argv[1:], "params": params}))
        """,
    )
    definition = tool(
        f"{{python}} {echo} --name={{name}} {{count}} '{{not_a_param}}'",
        properties={"name": {"type": "string"}, "count": {"type": "integer"}},
        required=["name"],
    )

    run = run_tool(definition, {"name": "Ada Lovelace", "count": 3})

    assert run.ok, run.result.error_message
    assert run.result.tool_name == "probe"
    assert run.result.result == {
        "argv": ["--name=Ada Lovelace", "3", "{not_a_param}"],
        "params": {"name": "Ada Lovelace", "count": 3},
    }
    assert run.result.error_message is None
    feedback = run.feedback
    assert feedback is not None
    assert feedback.exit_code == 0
    assert json.loads(feedback.stdout) == run.result.result
    assert feedback.stderr == "working\n"
    assert len(feedback.execution_id) == 36
    assert feedback.created_at.tzinfo is not None


def test_output_that_is_not_a_json_object_is_given_back_as_stdout(tmp_path: Path) -> None:
    run = run_tool(tool("echo just some text"), {})
    assert run.ok
    assert run.result.result == {"stdout": "just some text\n"}


def test_the_command_runs_without_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    definition = tool("printf %s {text}", properties={"text": {"type": "string"}})

    run = run_tool(definition, {"text": f"hi; touch {marker} && echo $HOME"})

    assert run.ok
    assert run.result.result == {"stdout": f"hi; touch {marker} && echo $HOME"}
    assert not marker.exists()


def test_invalid_params_fail_naming_the_field_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    definition = tool(
        f"touch {marker}",
        properties={"path": {"type": "string"}, "limit": {"type": "integer"}},
        required=["path"],
    )

    missing = run_tool(definition, {"limit": 2})
    wrong_type = run_tool(definition, {"path": "x", "limit": "two"})

    assert missing.result.status is FAILURE
    assert "'path' is a required property" in missing.result.error_message
    assert wrong_type.result.status is FAILURE
    assert wrong_type.result.error_message.startswith("invalid params for tool probe: limit:")
    assert missing.feedback is None and wrong_type.feedback is None
    assert not marker.exists()


def test_a_result_that_breaks_the_output_schema_is_a_failure(tmp_path: Path) -> None:
    definition = tool(
        """python3 -c 'print("{\\"count\\": \\"many\\"}")'""",
        output_schema={
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        },
    )

    run = run_tool(definition, {})

    assert run.result.status is FAILURE
    assert "does not match its output_schema" in run.result.error_message
    assert "count: 'many' is not of type 'integer'" in run.result.error_message
    assert run.result.result is None
    assert run.feedback is not None and run.feedback.exit_code == 0


def test_a_non_zero_exit_is_a_failure_that_says_the_code_and_the_last_error_line(
    tmp_path: Path,
) -> None:
    failing = program(
        tmp_path,
        "fail.py",
        """
        import sys
        print("partial output")
        print("reading input.csv", file=sys.stderr)
        print("input.csv: no such file", file=sys.stderr)
        sys.exit(3)
        """,
    )

    run = run_tool(tool(f"{{python}} {failing}"), {})

    assert run.result.status is FAILURE
    assert run.result.error_message == "tool probe exited with code 3: input.csv: no such file"
    assert run.feedback is not None
    assert run.feedback.exit_code == 3
    assert run.feedback.stdout == "partial output\n"


def test_a_program_that_does_not_exist_is_a_failure() -> None:
    run = run_tool(tool("/no/such/program --flag"), {})
    assert run.result.status is FAILURE
    assert run.result.error_message.startswith("cannot run tool probe: /no/such/program:")
    assert run.feedback is None


def test_a_tool_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    spawner = program(
        tmp_path,
        "spawn.py",
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(60)
        """,
    )

    # run_tool must not wait for the grandchild's 60 s (it holds the tool's stdout open):
    # a thread that is still running after 30 s is that hang.
    done: list[Any] = []
    worker = threading.Thread(
        target=lambda: done.append(run_tool(tool(f"{{python}} {spawner}"), {}, timeout=1.5)),
        daemon=True,
    )
    worker.start()
    worker.join(30)
    assert done, "run_tool waited for the killed tool's grandchild"
    run = done[0]
    assert run.timed_out
    assert run.result.status is FAILURE
    assert run.result.error_message == "tool probe timed out after 1.5s and was killed"
    assert run.feedback is not None and run.feedback.stdout == "started\n"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_output_is_capped_and_says_it_was_truncated(tmp_path: Path) -> None:
    noisy = program(
        tmp_path,
        "noisy.py",
        """
        import sys
        sys.stdout.write("x" * 3_000_000)
        sys.stderr.write("e" * 50)
        """,
    )

    run = run_tool(tool(f"{{python}} {noisy}"), {}, max_output=1000)

    assert run.truncated
    assert run.feedback is not None
    assert run.feedback.stdout.startswith("x" * 1000 + "\n[teamflow: output truncated")
    assert "2999000 of 3000000 bytes dropped" in run.feedback.stdout
    assert len(run.feedback.stdout) < 1100
    assert run.feedback.stderr == "e" * 50


def test_nul_characters_are_removed_so_the_database_can_store_the_feedback(
    tmp_path: Path, session: Session
) -> None:
    nul = program(
        tmp_path,
        "nul.py",
        """
        import sys
        sys.stdout.write("before\\x00after")
        sys.stderr.write("err\\x00or")
        """,
    )

    run = run_tool(tool(f"{{python}} {nul}"), {})
    assert run.feedback is not None
    record_feedback(run.feedback, session=session)
    session.commit()

    stored = get_feedback(run.feedback.execution_id, session=session)
    assert stored == run.feedback
    assert stored.stdout == "beforeafter"
    assert stored.stderr == "error"


def test_tools_run_in_the_given_folder_with_the_given_environment(tmp_path: Path) -> None:
    where = program(
        tmp_path,
        "where.py",
        """
        import json, os
        print(json.dumps({"cwd": os.getcwd(), "flag": os.environ.get("TEAMFLOW_TEST_FLAG")}))
        """,
    )
    work = tmp_path / "work"
    work.mkdir()

    run = run_tool(tool(f"{{python}} {where}"), {}, cwd=work, env={"TEAMFLOW_TEST_FLAG": "on"})

    assert run.result.result == {"cwd": str(work), "flag": "on"}


# --- elisp tools ---------------------------------------------------------------------------


def elisp_tool() -> ToolDefinition:
    return tool(
        '(princ (format "{\\"greeting\\": \\"%s, %s\\"}" "hello" {who}))',
        kind="elisp",
        tool_id="greet",
        properties={"who": {"type": "string"}},
        required=["who"],
    )


def test_an_elisp_tool_without_emacs_fails_saying_so(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    run = run_tool(elisp_tool(), {"who": "world"}, env={"PATH": str(empty)})
    assert run.result.status is FAILURE
    assert run.result.error_message == "cannot run tool greet: emacs is not installed"
    assert run.feedback is None


def test_an_elisp_tool_runs_emacs_in_batch_with_params_as_lisp_strings(tmp_path: Path) -> None:
    # A stand-in `emacs` on PATH records how it is called: the form and its quoting.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    emacs = bin_dir / "emacs"
    emacs.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        "print(json.dumps({'argv': sys.argv[1:], 'stdin': json.load(sys.stdin)}))\n"
    )
    emacs.chmod(0o755)

    run = run_tool(elisp_tool(), {"who": 'the "world"'}, env={"PATH": str(bin_dir)})

    assert run.ok, run.result.error_message
    assert run.result.result == {
        "argv": [
            "--batch",
            "--eval",
            '(princ (format "{\\"greeting\\": \\"%s, %s\\"}" "hello" "the \\"world\\""))',
        ],
        "stdin": {"who": 'the "world"'},
    }


@pytest.mark.skipif(shutil.which("emacs") is None, reason="emacs is not installed here")
def test_an_elisp_tool_runs_in_real_emacs() -> None:
    run = run_tool(elisp_tool(), {"who": "world"})
    assert run.ok, run.result.error_message
    assert run.result.result == {"greeting": "hello, world"}


# --- resource access -----------------------------------------------------------------------


def resources(tmp_path: Path) -> list[dict[str, str]]:
    return [
        {
            "type": "file",
            "id": "sales",
            "path": str(tmp_path / "data" / "q4-sales.csv"),
            "access": "read",
        },
        {"type": "file", "id": "artifacts", "path": str(tmp_path / "artifacts"), "access": "write"},
        {"type": "data", "id": "archive", "path": str(tmp_path / "archive"), "access": "read"},
        {"type": "link", "id": "wiki", "path": "https://example.com/wiki", "access": "read"},
    ]


def test_a_tool_may_write_a_resource_with_write_access(tmp_path: Path) -> None:
    target = tmp_path / "artifacts" / "reports" / "q4.md"

    run = run_tool(
        builtin("write_file"),
        {"path": str(target), "content": "# Q4\n"},
        resources=resources(tmp_path),
    )

    assert run.ok, run.result.error_message
    assert target.read_text() == "# Q4\n"


def test_a_tool_may_not_write_a_resource_with_read_access(tmp_path: Path) -> None:
    sales = tmp_path / "data" / "q4-sales.csv"
    sales.parent.mkdir()
    sales.write_text("date,revenue\n")

    run = run_tool(
        builtin("write_file"),
        {"path": str(sales), "content": "overwritten"},
        resources=resources(tmp_path),
    )

    assert run.result.status is FAILURE
    assert run.result.error_message == (
        f"tool write_file refused: param 'path' writes {sales}, which is resource 'sales' "
        f"({sales}) with read access"
    )
    assert run.feedback is None
    assert sales.read_text() == "date,revenue\n"


def test_read_access_covers_what_lies_inside_a_folder_and_symlinks_do_not_get_around_it(
    tmp_path: Path,
) -> None:
    write_file = builtin("write_file")
    (tmp_path / "archive").mkdir()
    (tmp_path / "artifacts").mkdir()
    sneaky = tmp_path / "artifacts" / "link"
    sneaky.symlink_to(tmp_path / "archive")

    inside = check_access(
        write_file,
        {"path": str(tmp_path / "archive" / "2024.csv"), "content": ""},
        resources(tmp_path),
    )
    through_link = check_access(
        write_file,
        {"path": "artifacts/link/2024.csv", "content": ""},
        resources(tmp_path),
        cwd=tmp_path,
    )
    over_a_read_file = check_access(
        write_file, {"path": str(tmp_path / "data"), "content": ""}, resources(tmp_path)
    )
    elsewhere = check_access(
        write_file, {"path": str(tmp_path / "scratch.txt"), "content": ""}, resources(tmp_path)
    )

    assert [r.split(",")[0] for r in inside] == [
        f"param 'path' writes {tmp_path / 'archive' / '2024.csv'}"
    ]
    assert "resource 'archive'" in through_link[0]
    assert "which holds resource 'sales'" in over_a_read_file[0]
    assert elsewhere == []


def test_only_params_marked_as_written_are_checked(tmp_path: Path) -> None:
    reader = builtin("read_csv_summary")
    refusals = check_access(
        reader, {"path": str(tmp_path / "data" / "q4-sales.csv")}, resources(tmp_path)
    )
    assert refusals == []


# --- the built-in tools on the demo's data -------------------------------------------------


@pytest.fixture(scope="module")
def q4(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_all(tmp_path_factory.mktemp("q4"))


def test_read_csv_summary_gives_columns_and_row_count(q4: tuple[Path, Path]) -> None:
    sales, _ = q4
    run = run_tool(builtin("read_csv_summary"), {"path": str(sales)})
    assert run.ok, run.result.error_message
    assert run.result.result == {
        "path": str(sales),
        "columns": ["date", "region", "segment", "product", "revenue", "units"],
        "row_count": 92 * 4 * 3 * 4,
    }


def test_analyze_sales_finds_the_trends_segments_and_regions(q4: tuple[Path, Path]) -> None:
    sales, _ = q4
    rows = list(csv_rows(sales))

    run = run_tool(builtin("analyze_sales"), {"sales_path": str(sales)})

    assert run.ok, run.result.error_message
    result = run.result.result
    assert result["months"] == ["2025-10", "2025-11", "2025-12"]
    total = sum(float(r["revenue"]) for r in rows)
    assert result["totals"]["rows"] == len(rows)
    assert result["totals"]["revenue"] == pytest.approx(total, abs=0.01)

    # The data grows Cloud Storage fastest (+22%/month), then Security Pack (+11%), and
    # shrinks Support Plan (-8%): the three biggest movements, growth or decline.
    trends = result["top_trends"]
    assert [t["product"] for t in trends] == ["Cloud Storage", "Security Pack", "Support Plan"]
    assert [t["direction"] for t in trends] == ["growing", "growing", "declining"]
    cloud = trends[0]
    october = sum(
        float(r["revenue"])
        for r in rows
        if r["product"] == "Cloud Storage" and r["date"].startswith("2025-10")
    )
    assert cloud["monthly_revenue"]["2025-10"] == pytest.approx(october, abs=0.01)
    assert 15 < cloud["avg_mom_growth_pct"] < 30
    assert cloud["summary"].startswith("Cloud Storage revenue is growing: +")

    segments = result["by_segment"]
    assert [s["segment"] for s in segments] == ["Enterprise", "SMB", "Consumer"]
    assert sum(s["share_pct"] for s in segments) == pytest.approx(100, abs=0.2)
    assert sum(s["revenue"] for s in segments) == pytest.approx(total, abs=0.05)

    regions = result["by_region"]
    assert [r["region"] for r in regions] == ["North", "East", "West", "South"]
    assert regions[0]["vs_average_pct"] > 0 > regions[-1]["vs_average_pct"]
    assert len(regions[0]["mom_growth_pct"]) == 2
    assert isinstance(regions[0]["quarter_change_pct"], float)
    assert len(result["summary"]) == 5


def test_cross_reference_satisfaction_correlates_revenue_and_scores(
    q4: tuple[Path, Path],
) -> None:
    sales, satisfaction = q4

    run = run_tool(
        builtin("cross_reference_satisfaction"),
        {"sales_path": str(sales), "satisfaction_path": str(satisfaction)},
    )

    assert run.ok, run.result.error_message
    result = run.result.result
    assert len(result["pairs"]) == 12
    assert result["unmatched"] == {"sales_only": [], "satisfaction_only": []}
    # The survey scores are built to rise with how well a region and segment sell.
    assert result["correlation"]["n"] == 12
    assert result["correlation"]["revenue_vs_score"] > 0.5
    assert result["correlation"]["strength"] == "strong positive"
    assert [s["segment"] for s in result["by_segment"]] == ["Enterprise", "SMB", "Consumer"]
    assert result["by_segment"][0]["score"] > result["by_segment"][-1]["score"]
    assert result["segment_correlation"]["n"] == 3
    assert result["region_correlation"]["n"] == 4
    assert result["summary"][0].startswith("revenue and satisfaction show a strong positive")


def test_write_file_writes_text_or_json_and_says_where(tmp_path: Path) -> None:
    report = tmp_path / "artifacts" / "report.md"
    data = tmp_path / "artifacts" / "trends.json"

    text = run_tool(builtin("write_file"), {"path": str(report), "content": "# Q4\n"})
    more = run_tool(
        builtin("write_file"), {"path": str(report), "content": "more\n", "append": True}
    )
    as_json = run_tool(builtin("write_file"), {"path": str(data), "content": {"top": [1, 2]}})

    assert text.result.result == {"path": str(report), "bytes": 5}
    assert more.ok
    assert report.read_text() == "# Q4\nmore\n"
    assert as_json.ok
    assert json.loads(data.read_text()) == {"top": [1, 2]}


def test_a_sales_file_without_a_needed_column_fails_naming_it(tmp_path: Path) -> None:
    sales = tmp_path / "sales.csv"
    sales.write_text("date,region,product,revenue\n2025-10-01,North,X,10\n")

    run = run_tool(builtin("analyze_sales"), {"sales_path": str(sales)})

    assert run.result.status is FAILURE
    assert "missing column(s) segment, units" in run.result.error_message


def test_a_sales_row_with_a_bad_date_fails_naming_its_line(tmp_path: Path) -> None:
    # analyze_sales' month_of: mypy found it could fall off its end (no return after fail).
    sales = tmp_path / "sales.csv"
    sales.write_text(
        "date,region,segment,product,revenue,units\n"
        "2025-10-01,North,SMB,X,10,1\n"
        "soon,North,SMB,X,10,1\n"
    )

    run = run_tool(builtin("analyze_sales"), {"sales_path": str(sales)})

    assert run.result.status is FAILURE
    assert "line 3: date 'soon' is not YYYY-MM-DD" in run.result.error_message


def test_a_missing_file_fails_saying_so(tmp_path: Path) -> None:
    run = run_tool(builtin("read_csv_summary"), {"path": str(tmp_path / "nope.csv")})
    assert run.result.status is FAILURE
    assert run.result.error_message.endswith("nope.csv: no such file")


def csv_rows(path: Path):
    import csv

    with path.open(newline="") as f:
        yield from csv.DictReader(f)


# --- tool files and the store --------------------------------------------------------------


def test_a_tool_file_can_name_a_program_beside_it_and_may_leave_out_timestamps(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "my tools"
    folder.mkdir()
    program(folder, "hello.py", 'import json; print(json.dumps({"hello": "there"}))')
    file = folder / "hello.json"
    file.write_text(
        json.dumps(
            {
                "tool_id": "hello",
                "type": "script",
                "description": "says hello",
                "command": "{python} {here}/hello.py",
                "input_schema": {"type": "object"},
                "output_schema": {"type": "object"},
            }
        )
    )

    definition = load_tool_file(file)
    run = run_tool(definition, {})

    assert run.ok, run.result.error_message
    assert run.result.result == {"hello": "there"}
    assert definition.created_at.tzinfo is not None


def test_the_built_in_tools_are_valid_tool_definitions() -> None:
    tools = {t.tool_id: t for t in builtin_tools()}
    assert set(tools) == {
        "read_csv_summary",
        "analyze_sales",
        "cross_reference_satisfaction",
        "write_file",
        "write_csv",
    }
    for writer in ("write_file", "write_csv"):
        assert tools[writer].input_schema["properties"]["path"]["x-teamflow-writes"] is True


def test_write_csv_writes_rows_as_csv(tmp_path: Path) -> None:
    rows = [{"region": "North", "revenue": 1.5}, {"region": "South", "revenue": 2, "note": [1]}]
    run = run_tool(builtin("write_csv"), {"path": str(tmp_path / "a" / "out.csv"), "rows": rows})
    assert run.ok, run.result.error_message
    assert run.result.result["columns"] == ["region", "revenue", "note"]
    lines = (tmp_path / "a" / "out.csv").read_text().splitlines()
    assert lines == ["region,revenue,note", "North,1.5,", "South,2,[1]"]


def test_the_store_adds_replaces_gets_and_lists_tools(session: Session) -> None:
    installed = install_builtin_tools(session=session)
    echo = tool("echo hi", tool_id="echo")
    add_tool(echo, session=session)
    changed = echo.model_copy(update={"description": "says hi twice", "command": "echo hi hi"})
    add_tool(changed, session=session)
    session.commit()

    assert get_tool("echo", session=session) == changed
    assert [t.tool_id for t in list_tools(session=session)] == sorted(
        [t.tool_id for t in installed] + ["echo"]
    )
    assert get_tool("analyze_sales", session=session) == builtin("analyze_sales")
    with pytest.raises(ToolError, match="no tool named 'nope'"):
        get_tool("nope", session=session)


# --- the CLI -------------------------------------------------------------------------------


def teamflow(*args: str, db_url: str) -> subprocess.CompletedProcess:
    return run_teamflow(args, {**os.environ, "TEAMFLOW_DATABASE_URL": db_url}, stdin_devnull=False)


def test_tool_add_and_tool_list(db_url: str, tmp_path: Path) -> None:
    file = tmp_path / "analyze_sales.json"
    shutil.copy(Path(__file__).parents[1] / "flows" / "toolbox" / "analyze_sales.json", file)

    added = teamflow("tool", "add", str(file), db_url=db_url)
    listed = teamflow("tool", "list", db_url=db_url)
    as_json = teamflow("tool", "list", "--json", db_url=db_url)

    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "added tool analyze_sales (script)"
    assert listed.stdout.startswith("analyze_sales")
    assert "script" in listed.stdout
    [entry] = json.loads(as_json.stdout)
    assert entry["tool_id"] == "analyze_sales"
    assert entry["command"] == "{python} {tools_dir}/analyze_sales.py"


def test_tool_add_refuses_an_invalid_file_in_one_line(db_url: str, tmp_path: Path) -> None:
    file = tmp_path / "bad.json"
    file.write_text(json.dumps({"tool_id": "bad", "type": "bash", "command": "x"}))

    result = teamflow("tool", "add", str(file), db_url=db_url)

    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("teamflow: error: ")
    assert "type" in line


def test_tool_commands_do_not_import_prefect(db_url: str) -> None:
    code = (
        "import sys\n"
        "from flows.cli import app\n"
        "try:\n"
        "    app(['tool', 'list'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m == 'prefect' or m.startswith('prefect.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TEAMFLOW_DATABASE_URL": db_url},
    )
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr


def test_built_in_tools_are_at_hand_after_db_upgrade_and_say_where_they_come_from(
    db_url: str, tmp_path: Path
) -> None:
    assert json.loads(teamflow("tool", "list", "--json", db_url=db_url).stdout) == []
    upgraded = teamflow("db", "upgrade", db_url=db_url)
    assert upgraded.returncode == 0, upgraded.stderr
    shipped = sorted(t.tool_id for t in builtin_tools())
    assert f"built-in tools added: {', '.join(shipped)}" in upgraded.stdout
    listed = json.loads(teamflow("tool", "list", "--json", db_url=db_url).stdout)
    assert [(t["tool_id"], t["origin"]) for t in listed] == [(t, "built-in") for t in shipped]
    assert "[built-in]" in teamflow("tool", "list", db_url=db_url).stdout

    # A user's change under a built-in's name is kept by the next upgrade, and said so.
    file = tmp_path / "write_file.json"
    data = json.loads((BUILTIN_TOOLS_DIR / "write_file.json").read_text())
    file.write_text(json.dumps({**data, "command": "{python} {here}/mine.py"}))
    assert teamflow("tool", "add", str(file), db_url=db_url).returncode == 0
    again = teamflow("db", "upgrade", db_url=db_url)
    assert "built-in tools added" not in again.stdout
    origins = {t["tool_id"]: t["origin"] for t in json.loads(
        teamflow("tool", "list", "--json", db_url=db_url).stdout)}  # fmt: skip
    assert origins["write_file"] == "built-in, changed"
    # `tool add --builtin` puts the shipped ones back.
    back = teamflow("tool", "add", "--builtin", db_url=db_url)
    assert back.stdout == f"added built-in tools: {', '.join(shipped)}\n"
    origins = {t["tool_id"]: t["origin"] for t in json.loads(
        teamflow("tool", "list", "--json", db_url=db_url).stdout)}  # fmt: skip
    assert set(origins.values()) == {"built-in"}
    refused = teamflow("tool", "add", db_url=db_url)
    assert (refused.returncode, refused.stderr) == (
        1, "teamflow: error: give a tool definition FILE or --builtin (one of them)\n",
    )  # fmt: skip
