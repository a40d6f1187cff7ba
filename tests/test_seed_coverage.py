"""Every seed item, live: one row per item of the five seeds, naming the test that shows it
working through something a user runs (issue 37).

The items are parsed from the seed texts (formats, enum values, notification types, SQL table
columns, colours, jq recipes), so a seed item without a row fails here. A row names
`file::test` (the test must exist), or says `GAP: ...` for an item known not to be live yet;
the gaps are listed in one place so that none hides.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SEEDS = TESTS / "fixtures" / "seeds"  # a copy of the seed documents, as they were given
SHARED_SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"
"""Where the specification is kept: `shared/` beside the checkout, where a machine has it."""


def _text(prefix: str) -> str:
    [path] = SEEDS.glob(f"{prefix}_*.txt")
    return path.read_text(encoding="utf-8")


def seed_items() -> set[tuple[str, str, str]]:
    """(seed, kind, item) of every item the seed texts list."""
    items: set[tuple[str, str, str]] = set()
    t = _text("000")
    items |= {("000", "format", n.strip()) for n in re.findall(r"^### (.+)$", t, re.M)}
    for group in re.findall(r'"((?:[a-z_]+ \| )+[a-z_]+)"', t):
        items |= {("000", "enum", v) for v in group.split(" | ") if v not in ("string", "object")}
    t = _text("001")
    items |= {("001", "format", n.strip()) for n in re.findall(r"^### (.+)\n```", t, re.M)}
    items |= {("001", "notification", n) for n in re.findall(r"^#### (\w+)$", t, re.M)}
    for group in re.findall(r"# ((?:\w+\|)+\w+)", t):
        items |= {("001", "enum", v) for v in group.split("|")}
    items |= {("001", "enum", v) for v in re.findall(r"^- `(\w+)`:", t, re.M)}
    for table, body in re.findall(r"CREATE TABLE (\w+) \((.*?)\n\);", t, re.S):
        for line in body.splitlines():
            m = re.match(r"\s+(\w+) ", line)
            if m and m.group(1) != "PRIMARY":
                items.add(("001", "column", f"{table}.{m.group(1)}"))
    t = _text("002")
    for group in re.findall(r"Enum: ([A-Za-z_ |]+?)(?: \| \.\.\.)?\)", t):
        items |= {("002", "enum", v.strip()) for v in group.split(" | ")}
    items |= {("002", "enum", v) for v in re.findall(r'"status": "([A-Z_]+)"', t)}
    items |= {("002", "format", n) for n in re.findall(r"^## (Schema v[\d.]+)", t, re.M)}
    t = _text("003")
    for group in re.findall(r'"role": "((?:\w+\|)+\w+)"', t):
        items |= {("003", "enum", v) for v in group.split("|")}
    for name in re.findall(r"^## (JSON Data Structure|Console Logging Format)$", t, re.M):
        items.add(("003", "format", name))
    t = _text("004")
    items |= {("004", "format", n) for n in re.findall(r"^interface (\w+)", t, re.M)}
    for group in re.findall(r'//.*?((?:"[\w-]+" \| )+"[\w-]+")', t):
        items |= {("004", "enum", v) for v in re.findall(r'"([\w-]+)"', group)}
    items |= {("004", "colour", c) for c in re.findall(r"^\| (\w+) \| \\033", t, re.M)}
    items |= {("004", "recipe", r.strip()) for r in re.findall(r"^# (.+)\njq ", t, re.M)}
    return items


# Tests the rows name, by a short alias.
LIVE = "test_seed_live.py::"
FORMATS_001 = LIVE + "test_a_good_payload_of_every_001_type_reads_back_as_its_notification"
VIEWS = LIVE + "test_the_three_formats_show_the_same_messages"
JUNK = LIVE + "test_mark_junk_sets_the_000_status"
ASK = LIVE + "test_msg_ask_sends_a_user_message_with_its_content_type_and_session"
STATUS = LIVE + "test_a_status_update_carries_the_current_task_and_capacity"
CAPS = LIVE + "test_the_lead_hears_each_members_capabilities_on_joining_and_on_a_tool_change"
AGENT_MSG = LIVE + "test_a_members_message_to_another_is_a_typed_agent_message_with_attachments"
COLOURS = LIVE + "test_colours_follow_the_roles_of_the_004_table"
WAITING = LIVE + "test_a_member_waiting_on_someone_tells_the_lead_waiting_response"
TEAM_TASK = "test_team_task.py::test_two_members_work_in_parallel_and_everything_is_recorded"
TASK_CLI = "test_team_task.py::test_the_task_commands_create_run_list_and_show_a_task"
TOOL_FAIL = "test_team_task.py::test_a_tool_that_exits_non_zero_fails_the_member_and_tells_the_lead"
ASYNC_DIES = "test_team_task.py::test_an_async_run_that_dies_before_its_result_tells_the_member_why"
ANALYST = "test_runtimes.py::test_a_scripted_analyst_does_the_q4_analysis_with_the_real_tools"
STALE = "test_watchdog.py::test_a_stale_member_goes_offline_and_alarms_once_until_it_comes_back"
ALERT = "test_system_alert.py::test_an_alert_for_one_member_records_when_it_fired"
SCHEDULE = "test_system_alert.py::test_an_alert_without_member_reaches_every_active_member"
MEMORY = "test_memory.py::test_a_memory_comes_back_as_stored_and_each_read_is_counted"
MEMORY_SCOPE = "test_memory.py::test_an_individual_memory_is_seen_by_its_own_agent_only"
MEMORY_TYPES = "test_memory.py::test_search_filters_by_type_and_limit"
KNOWLEDGE = "test_knowledge_cli.py::test_add_list_and_show_text_json_and_link_entries"
TOOLS_CLI = "test_tools.py::test_tool_add_and_tool_list"
ELISP = "test_tools.py::test_an_elisp_tool_runs_emacs_in_batch_with_params_as_lisp_strings"
SCRIPT = "test_tools.py::test_the_command_runs_without_a_shell"
FEEDBACK = (
    "test_tools.py::test_a_non_zero_exit_is_a_failure_that_says_the_code_and_the_last_error_line"
)
RESOURCE_READ = "test_tools.py::test_a_tool_may_not_write_a_resource_with_read_access"
RESOURCE_WRITE = "test_tools.py::test_a_tool_may_write_a_resource_with_write_access"
PROJECT = "test_projects.py::test_create_stores_a_ready_000_project_with_its_milestones"
CONTEXT = "test_projects.py::test_a_tasks_place_is_its_000_context"
TEMPLATE = "test_templates.py::test_render_fills_in_every_variable"
CONVERSATION = "test_seed_003.py::test_seed_conversation_round_trips_through_the_messages_table"
CONSOLE = "test_tasks.py::test_the_seed_conversation_renders_as_the_seeds_console_log"
AGENT_STATE = "test_seed_003.py::test_agent_state_round_trips_a_busy_agent"
TABLES = "test_seed_001.py::test_task_tables_have_the_seeds_names_and_types"
ENVELOPE = "test_cli_teams.py::test_json_errors_are_the_001_error_envelope_on_stdout"
TOOL_RESULT = "test_seed_001.py::test_tool_result_standard_is_the_tool_result_payload"
V1 = "test_seed_002.py::test_v1_template_instance_uses_every_v1_key"
MEMBERS = "test_inbox.py::test_members_get_agent_ids_and_colours_in_the_seeds_order"
JQ_CONFIG = "test_inbox.py::test_jq_recipes_on_config_answer_as_the_database"
JQ_INBOX = "test_inbox.py::test_jq_recipes_on_inboxes_answer_as_the_database"
JQ_APPEND = "test_inbox.py::test_sync_takes_in_a_jq_append_and_read_flags"
INBOX_VIEWS = LIVE + "test_the_inbox_in_every_format_validates"
CONFIG = "test_seed_004.py::test_team_config_examples_round_trip"
TYPED = "test_seed_004.py::test_typed_message_examples_round_trip"
TASK_STATUS = "test_tasks.py::test_member_status_is_mirrored_to_task_status_json"
SCHEMA_VERSION = "test_seed_004.py::test_config_without_schema_version_reads_as_1_0_0"

RESOURCES = LIVE + "test_resource_add_list_and_show"
CONTEXT_STATUS = LIVE + "test_a_contexts_status_follows_its_task"
AGENT_CONFIG = LIVE + "test_each_member_has_its_agent_configuration_kept_current"
EXPERIENCE = LIVE + "test_task_show_reads_the_feedback_and_the_experience_log"
TOOL_COLUMNS = LIVE + "test_each_step_writes_its_tool_calls_and_tool_results_columns"
MEMBER_RESOURCES = LIVE + "test_member_add_and_set_give_resources_shown_by_member_show"
ACTION = "test_team_task.py::test_task_action_shows_an_async_action_of_a_run_by_its_task_id"

COVERAGE: dict[tuple[str, str, str], str] = {
    ("000", "enum", "command"): VIEWS,
    ("000", "enum", "data"): RESOURCES,
    ("000", "enum", "elisp"): ELISP,
    ("000", "enum", "event"): VIEWS,
    ("000", "enum", "failure"): EXPERIENCE,
    ("000", "enum", "file"): RESOURCE_READ,
    ("000", "enum", "finished"): CONTEXT_STATUS,
    ("000", "enum", "json"): KNOWLEDGE,
    ("000", "enum", "junk"): JUNK,
    ("000", "enum", "link"): KNOWLEDGE,
    ("000", "enum", "log"): VIEWS,
    ("000", "enum", "pending"): CONTEXT_STATUS,
    ("000", "enum", "read"): JUNK,
    ("000", "enum", "ready"): PROJECT,
    ("000", "enum", "running"): CONTEXT_STATUS,
    ("000", "enum", "script"): SCRIPT,
    ("000", "enum", "sent"): JUNK,
    ("000", "enum", "success"): EXPERIENCE,
    ("000", "enum", "text"): KNOWLEDGE,
    ("000", "enum", "write"): RESOURCE_WRITE,
    ("000", "format", "Agent Configuration"): AGENT_CONFIG,
    ("000", "format", "Context"): CONTEXT,
    ("000", "format", "Experience Log"): EXPERIENCE,
    ("000", "format", "Feedback"): FEEDBACK,
    ("000", "format", "Knowledge Entry"): KNOWLEDGE,
    ("000", "format", "LLM Prompt Template"): TEMPLATE,
    ("000", "format", "Message"): INBOX_VIEWS,
    ("000", "format", "Project Definition"): PROJECT,
    ("000", "format", "Resource Definition"): MEMBER_RESOURCES,
    ("000", "format", "Tool Definition"): TOOLS_CLI,
    ("001", "column", "agent_state.agent_id"): AGENT_STATE,
    ("001", "column", "agent_state.created_at"): AGENT_STATE,
    ("001", "column", "agent_state.last_heartbeat"): AGENT_STATE,
    ("001", "column", "agent_state.processing_state"): AGENT_STATE,
    ("001", "column", "agent_state.status"): AGENT_STATE,
    ("001", "column", "agent_state.updated_at"): AGENT_STATE,
    ("001", "column", "messages.agent_id"): CONVERSATION,
    ("001", "column", "messages.content"): CONVERSATION,
    ("001", "column", "messages.conversation_id"): CONVERSATION,
    ("001", "column", "messages.id"): CONVERSATION,
    ("001", "column", "messages.role"): CONVERSATION,
    ("001", "column", "messages.timestamp"): CONVERSATION,
    ("001", "column", "messages.tool_calls"): TOOL_COLUMNS,
    ("001", "column", "messages.tool_results"): TOOL_COLUMNS,
    ("001", "column", "task_assignees.assignee_id"): TASK_CLI,
    ("001", "column", "task_assignees.task_id"): TASK_CLI,
    ("001", "column", "tasks.created_at"): TASK_CLI,
    ("001", "column", "tasks.creator_id"): TASK_CLI,
    ("001", "column", "tasks.description"): TASK_CLI,
    ("001", "column", "tasks.id"): TASK_CLI,
    ("001", "column", "tasks.status"): TASK_CLI,
    ("001", "column", "tasks.title"): TASK_CLI,
    ("001", "enum", "ALARM"): STALE,
    ("001", "enum", "FAILURE"): TOOL_FAIL,
    ("001", "enum", "SCHEDULED_EVENT"): SCHEDULE,
    ("001", "enum", "SUCCESS"): ANALYST,
    ("001", "enum", "TIMER"): ALERT,
    ("001", "enum", "agent_procedure"): MEMORY_TYPES,
    ("001", "enum", "archived"): TOOL_FAIL,
    ("001", "enum", "busy"): STATUS,
    ("001", "enum", "completed"): TEAM_TASK,
    ("001", "enum", "conversation_context"): MEMORY_TYPES,
    ("001", "enum", "critical"): TASK_CLI,
    ("001", "enum", "error"): FORMATS_001,
    ("001", "enum", "error_handling"): MEMORY_TYPES,
    ("001", "enum", "event_pattern"): MEMORY_TYPES,
    ("001", "enum", "high"): TASK_CLI,
    ("001", "enum", "idle"): STATUS,
    ("001", "enum", "image_id"): ASK,
    ("001", "enum", "in_progress"): STATUS,
    ("001", "enum", "individual"): MEMORY_SCOPE,
    ("001", "enum", "knowledge"): MEMORY_TYPES,
    ("001", "enum", "low"): TASK_CLI,
    ("001", "enum", "normal"): TASK_CLI,
    ("001", "enum", "offline"): STALE,
    ("001", "enum", "pending"): TASK_CLI,
    ("001", "enum", "proactive_action"): MEMORY_TYPES,
    ("001", "enum", "shared"): MEMORY_SCOPE,
    ("001", "enum", "text"): ASK,
    ("001", "enum", "user_fact"): MEMORY_TYPES,
    ("001", "enum", "user_preference"): MEMORY_TYPES,
    ("001", "enum", "voice_transcript"): ASK,
    ("001", "format", "Base Notification"): FORMATS_001,
    ("001", "format", "Error Response"): ENVELOPE,
    ("001", "format", "Failure Example"): TOOL_FAIL,
    ("001", "format", "Memory Object"): MEMORY,
    ("001", "format", "SQL Tables"): TABLES,
    ("001", "format", "Success Example"): ANALYST,
    ("001", "format", "Success Response"): ENVELOPE,
    ("001", "format", "Task (Database/Output)"): TASK_CLI,
    ("001", "format", "TaskCreate (Input)"): TASK_CLI,
    ("001", "format", "ToolResult Schema"): TOOL_RESULT,
    ("001", "notification", "agent_message"): AGENT_MSG,
    ("001", "notification", "capability_broadcast"): CAPS,
    ("001", "notification", "status_update"): STATUS,
    ("001", "notification", "system_alert"): ALERT,
    ("001", "notification", "task_assignment"): TEAM_TASK,
    ("001", "notification", "tool_result"): ASYNC_DIES,
    ("001", "notification", "user_message"): ASK,
    ("002", "enum", "ASYNC"): ACTION,
    ("002", "enum", "ERROR"): ANALYST,
    ("002", "enum", "EXECUTING"): ANALYST,
    ("002", "enum", "OBSERVATION"): ANALYST,
    ("002", "enum", "PLAN"): ANALYST,
    ("002", "enum", "SUCCESS"): ANALYST,
    ("002", "enum", "SYNC"): TEAM_TASK,
    ("002", "enum", "TASK_STARTED"): ACTION,
    ("002", "enum", "internal"): ANALYST,
    ("002", "enum", "script"): ANALYST,
    ("002", "enum", "tool"): ANALYST,
    ("002", "format", "Schema v1.0"): V1,
    ("002", "format", "Schema v2.0"): ACTION,
    ("003", "enum", "assistant"): ACTION,
    ("003", "enum", "system"): ACTION,
    ("003", "enum", "user"): ACTION,
    ("003", "format", "Console Logging Format"): CONSOLE,
    ("003", "format", "JSON Data Structure"): ACTION,
    ("004", "colour", "blue"): MEMBERS,
    ("004", "colour", "cyan"): COLOURS,
    ("004", "colour", "green"): MEMBERS,
    ("004", "colour", "magenta"): COLOURS,
    ("004", "colour", "red"): COLOURS,
    ("004", "colour", "yellow"): COLOURS,
    ("004", "enum", "available"): TEAM_TASK,
    ("004", "enum", "general-purpose"): COLOURS,
    ("004", "enum", "haiku"): MEMBERS,
    ("004", "enum", "opus"): MEMBERS,
    ("004", "enum", "sonnet"): MEMBERS,
    ("004", "enum", "specialized"): COLOURS,
    ("004", "enum", "task_complete"): TEAM_TASK,
    ("004", "enum", "waiting_response"): WAITING,
    ("004", "format", "IdleNotification"): WAITING,
    ("004", "format", "InboxMessage"): INBOX_VIEWS,
    ("004", "format", "PlanApprovalRequest"): TYPED,
    ("004", "format", "PlanApprovalResponse"): TYPED,
    ("004", "format", "ShutdownApproved"): TYPED,
    ("004", "format", "TaskStatus"): TASK_STATUS,
    ("004", "format", "TeamConfig"): CONFIG,
    ("004", "format", "TeamMember"): CONFIG,
    ("004", "recipe", "Add new member"): JQ_CONFIG,
    ("004", "recipe", "Add new message"): JQ_APPEND,
    ("004", "recipe", "Add schema version to old config"): JQ_CONFIG,
    ("004", "recipe", "Add shutdown timestamp"): JQ_CONFIG,
    ("004", "recipe", "Check message structure"): JQ_INBOX,
    ("004", "recipe", "Check required fields"): JQ_CONFIG,
    ("004", "recipe", "Check schema version"): JQ_CONFIG,
    ("004", "recipe", "Count unread"): JQ_INBOX,
    ("004", "recipe", "Export readable format"): JQ_INBOX,
    ("004", "recipe", "Get active members"): JQ_CONFIG,
    ("004", "recipe", "Get all members"): JQ_CONFIG,
    ("004", "recipe", "Get all messages"): JQ_INBOX,
    ("004", "recipe", "Get messages from specific sender"): JQ_INBOX,
    ("004", "recipe", "Get specific member"): JQ_CONFIG,
    ("004", "recipe", "Get unread messages"): JQ_INBOX,
    ("004", "recipe", "Mark all as read"): JQ_APPEND,
    ("004", "recipe", "Mark specific message"): JQ_APPEND,
    ("004", "recipe", "Mark specific message as read"): JQ_APPEND,
    ("004", "recipe", "Update member status"): JQ_CONFIG,
    ("004", "recipe", "Validate JSON array"): JQ_INBOX,
    ("004", "recipe", "Validate JSON syntax"): JQ_CONFIG,
    ("004", "recipe", "Validate member structure"): JQ_CONFIG,
}
"""Each seed item and the test that shows it live (or `GAP: ...`)."""

KNOWN_GAPS: set[str] = set()
"""What is not live yet; a new gap must be added here on purpose."""


def test_every_seed_item_has_a_row() -> None:
    missing = sorted(seed_items() - COVERAGE.keys())
    assert not missing, f"seed items without a row in COVERAGE: {missing}"


def test_every_row_is_an_item_of_the_seeds() -> None:
    assert not sorted(COVERAGE.keys() - seed_items())


def test_the_parse_finds_every_kind_of_item_of_every_seed() -> None:
    kinds = {(seed, kind) for seed, kind, _ in seed_items()}
    assert {
        ("001", "notification"),
        ("001", "column"),
        ("004", "recipe"),
        ("004", "colour"),
    } <= kinds
    assert {seed for seed, _ in kinds} == {"000", "001", "002", "003", "004"}
    assert len([k for k in seed_items() if k[1] == "notification"]) == 7


@pytest.mark.parametrize("proof", sorted({p for p in COVERAGE.values() if "::" in p}))
def test_each_row_names_a_test_that_exists(proof: str) -> None:
    file, _, name = proof.partition("::")
    text = (TESTS / file).read_text(encoding="utf-8")
    assert re.search(rf"^(async )?def {name}\(", text, re.M), proof


def test_the_gaps_are_the_known_ones() -> None:
    gaps = {p for p in COVERAGE.values() if "::" not in p}
    assert gaps <= KNOWN_GAPS, gaps - KNOWN_GAPS
    assert all(g.startswith("GAP: ") for g in KNOWN_GAPS)  # none left today


@pytest.mark.skipif(not SHARED_SEEDS.is_dir(), reason="the shared seed folder is not here")
def test_the_copy_of_the_seeds_is_the_shared_one() -> None:
    for path in SHARED_SEEDS.glob("0*.txt"):
        assert (SEEDS / path.name).read_bytes() == path.read_bytes(), path.name
