"""Task dependencies in the store: blockers recorded and refused, readiness claimed exactly
once (also when two blockers complete at once), failure carried to dependents, and a task
without assignees taken by one idle member."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from cli_runner import teamflow as run_teamflow
from factories import TEAM, research_team

from models import dependencies as deps
from models import membership
from models.db import session_scope
from models.task import TaskError, TaskState, create_task, get_task, list_tasks, move_task

pytestmark = pytest.mark.usefixtures("db_url")


def usable(_runtime: dict) -> bool:
    return True


def task(title: str, *, blocked_by: tuple = (), assignees: tuple = ("analyst-1",)) -> uuid.UUID:
    with session_scope() as s:
        row = create_task(TEAM, title=title, assignees=list(assignees), session=s)
        deps.add_blockers(row, [str(b) for b in blocked_by], session=s)
        return row.id


def close(task_id: uuid.UUID, ok: bool) -> list[tuple[uuid.UUID, str]]:
    """What a team-task run's close does: the task completed or archived, dependents settled."""
    with session_scope() as s:
        move_task(task_id, to=TaskState.COMPLETED if ok else TaskState.ARCHIVED, session=s)
        return deps.settle(task_id, ok, session=s)


def test_blockers_are_recorded_and_listed(home: Path) -> None:
    research_team()
    a, b = task("a"), task("b")
    c = task("c", blocked_by=(b, a))
    with session_scope() as s:
        assert deps.blockers_of([a, b, c], session=s) == {c: sorted([str(a), str(b)])}
        assert sorted(deps.open_blockers(c, session=s)) == sorted([(a, "pending"), (b, "pending")])


@pytest.mark.parametrize(
    ("blocker", "message"),
    [
        ("not-a-uuid", "is not a task id"),
        ("00000000-0000-0000-0000-000000000000", "no task with this id"),
        ("other-team", "of team 'other-team', not 'research-team'"),
        ("repeated", "names the same task twice"),
        ("failed", r"failed \(archived\)"),
    ],
)
def test_bad_blockers_are_refused_and_nothing_is_written(
    home: Path, blocker: str, message: str
) -> None:
    research_team()
    a = task("a")
    given = [blocker]
    if blocker == "other-team":
        membership.create_team("other-team", description="another", lead="boss")
        given = [str(create_task("other-team", title="theirs").id)]
    elif blocker == "repeated":
        given = [str(a), str(a)]
    elif blocker == "failed":
        move_task(a, to=TaskState.ARCHIVED)
        given = [str(a)]
    with pytest.raises(TaskError, match=message):
        task("refused", blocked_by=tuple(given))
    assert [t.title for t in list_tasks(TEAM)] == ["a"]


def test_a_cycle_is_refused(home: Path) -> None:
    research_team()
    a = task("a")
    b = task("b", blocked_by=(a,))
    c = task("c", blocked_by=(b,))
    with session_scope() as s:
        row = get_task(a, session=s)
        with pytest.raises(TaskError, match=r"cycle: .* -> .* -> .* -> "):
            deps.add_blockers(row, [str(c)], session=s)
    with session_scope() as s, pytest.raises(TaskError, match="cycle"):
        deps.add_blockers(get_task(a, session=s), [str(a)], session=s)
    with session_scope() as s:
        assert deps.blockers_of([a], session=s) == {}


def test_a_dependent_is_ready_only_when_all_its_blockers_completed(home: Path) -> None:
    research_team()
    a, b = task("a"), task("b")
    c = task("c", blocked_by=(a, b))
    d = task("d", blocked_by=(a,))
    assert close(a, ok=True) == [(d, TEAM)]  # c still waits for b
    assert get_task(c).start_claimed_at is None
    assert close(b, ok=True) == [(c, TEAM)]
    # Claimed once: settling again (a retried close) starts nothing more.
    with session_scope() as s:
        assert deps.settle(b, True, session=s) == []
        assert deps.settle(a, True, session=s) == []
    assert get_task(c).start_claimed_at is not None
    assert get_task(c).status == "pending"  # its run moves it


def test_two_blockers_completing_at_once_start_the_dependent_exactly_once(
    home: Path, db_url: str
) -> None:
    """Two workers close the last two blockers at the same moment. On PostgreSQL both
    transactions have completed their blocker before either looks at the dependent (neither
    sees the other's uncommitted completion): one must still start it, and only one."""
    research_team()
    postgres = db_url.startswith("postgresql")
    for _ in range(5):
        a, b = task("a"), task("b")
        c = task("c", blocked_by=(a, b))
        barrier = threading.Barrier(2, timeout=30)
        started: list[list] = []
        errors: list[BaseException] = []

        def finish(blocker: uuid.UUID, barrier=barrier, started=started, errors=errors) -> None:
            try:
                if not postgres:
                    barrier.wait()  # SQLite: one writer at a time; race to BEGIN
                with session_scope() as s:
                    move_task(blocker, to=TaskState.COMPLETED, session=s)
                    if postgres:
                        barrier.wait()  # both completions written, neither committed
                    started.append(deps.settle(blocker, True, session=s))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=finish, args=(x,)) for x in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert sorted(started, key=len) == [[], [(c, TEAM)]]


def test_claiming_a_start_is_exactly_once_among_racing_claimants(home: Path) -> None:
    research_team()
    a = task("a")
    c = task("c", blocked_by=(a,))
    move_task(a, to=TaskState.COMPLETED)
    barrier = threading.Barrier(4, timeout=30)
    results: list[bool] = []

    def claim() -> None:
        barrier.wait()
        with session_scope() as s:
            results.append(deps.claim_start(c, session=s))

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [False, False, False, True]


def test_a_failed_blocker_fails_its_dependents_transitively(home: Path) -> None:
    research_team()
    a, other = task("a"), task("other")
    b = task("b", blocked_by=(a,))
    c = task("c", blocked_by=(b,))
    d = task("d", blocked_by=(other, a))
    free = task("free", blocked_by=(other,))
    assert close(a, ok=False) == []
    for failed, by in ((b, a), (c, b), (d, a)):
        row = get_task(failed)
        assert (row.status, row.reason) == ("archived", f"blocked by task {by}, which failed")
    assert get_task(free).status == "pending" and get_task(free).reason is None
    assert close(other, ok=True) == [(free, TEAM)]  # d failed already: not started


def test_open_blockers_keep_a_task_pending_with_the_reason(home: Path) -> None:
    research_team()
    a = task("a")
    c = task("c", blocked_by=(a,))
    with session_scope() as s:
        assignees, reason = deps.before_claim(c, usable, session=s)
    assert assignees == ["analyst-1"]
    assert reason == f"blocked by task {a} (pending)"


def test_a_task_without_assignees_is_taken_by_one_idle_member(home: Path) -> None:
    research_team()
    first = task("first", assignees=())
    second = task("second", assignees=())
    third = task("third", assignees=())
    with session_scope() as s:
        assert deps.before_claim(first, usable, session=s) == (["analyst-1"], None)
        move_task(first, to=TaskState.IN_PROGRESS, session=s)
    with session_scope() as s:
        assert deps.before_claim(second, usable, session=s) == (["analyst-2"], None)
        move_task(second, to=TaskState.IN_PROGRESS, session=s)
    with session_scope() as s:
        # The lead (coordinator) never takes one; both analysts are busy.
        assert deps.before_claim(third, usable, session=s) == ([], deps.NO_IDLE_MEMBER)
    with session_scope() as s:
        assert deps.before_claim(third, lambda runtime: False, session=s) == (
            [],
            deps.NO_IDLE_MEMBER,
        )
    assert [a.assignee_id for a in get_task(first).assignees] == ["analyst-1"]


def test_two_runs_of_an_unassigned_task_assign_it_once(home: Path) -> None:
    research_team()
    for _ in range(3):
        t = task("t", assignees=())
        barrier = threading.Barrier(2, timeout=30)
        claims: list[tuple] = []

        def run(t=t, barrier=barrier, claims=claims) -> None:
            barrier.wait()
            with session_scope() as s:
                names, reason = deps.before_claim(t, usable, session=s)
                moved = reason is None and move_task(
                    t, to=TaskState.IN_PROGRESS, only_from={TaskState.PENDING}, session=s
                )
                claims.append((names, moved))

        threads = [threading.Thread(target=run) for _ in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert len(claims) == 2
        assert sorted(moved for _, moved in claims) == [False, True]
        assert len(get_task(t).assignees) == 1
        move_task(t, to=TaskState.COMPLETED)


# --- the CLI -------------------------------------------------------------------------------


def teamflow(*args: str) -> subprocess.CompletedProcess:
    # PREFECT_API_URL at a closed port: nothing here may need a server.
    return run_teamflow(
        args, {**os.environ, "PREFECT_API_URL": "http://127.0.0.1:9/api"}, stdin_devnull=False
    )


def test_cli_blocked_by_is_recorded_and_listed(home: Path) -> None:
    research_team()
    a = task("a")
    # Only a member that can run tasks may be assigned one.
    runtime = ("--runtime", "command", "--command", "python3 examples/echo_agent.py")
    assert teamflow("member", "set", TEAM, "analyst-2", *runtime).returncode == 0
    made = teamflow(
        "task", "create", TEAM, "--title", "b", "--assignee", "analyst-2",
        "--blocked-by", str(a), "--json",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    b = json.loads(made.stdout)["id"]
    assert json.loads(made.stdout)["blocked_by"] == [str(a)]
    listed = json.loads(teamflow("task", "list", TEAM, "--json").stdout)
    assert [(t["title"], t["blocked_by"]) for t in listed] == [("a", []), ("b", [str(a)])]
    lines = teamflow("task", "list", TEAM).stdout.splitlines()
    assert lines[0].startswith(str(a)) and "blocked by" not in lines[0]
    assert lines[1].startswith(b) and lines[1].endswith(f"blocked by {str(a)[:8]}")
    shown = teamflow("task", "show", b).stdout
    assert f"blocked_by    ['{a}']" in shown

    # Running it before its blocker completed is refused, naming the blocker.
    ran = teamflow("task", "run", b)
    assert ran.returncode == 1
    assert ran.stderr.strip() == (
        f"teamflow: error: task {b[:8]} is blocked by {a} (pending); "
        "it starts by itself when they complete"
    )


@pytest.mark.parametrize(
    ("blocker", "message"),
    [
        ("nope", "--blocked-by 'nope' is not a task id (a UUID)"),
        ("00000000-0000-0000-0000-000000000000", "no task with this id"),
    ],
)
def test_cli_bad_blocked_by_is_one_line_and_writes_nothing(
    home: Path, blocker: str, message: str
) -> None:
    research_team()
    made = teamflow("task", "create", TEAM, "--title", "b", "--blocked-by", blocker)
    assert made.returncode == 1
    assert len(made.stderr.strip().splitlines()) == 1
    assert made.stderr.startswith("teamflow: error: ") and message in made.stderr
    assert list_tasks(TEAM) == []


def test_cli_run_of_an_unassigned_task_without_an_idle_member_is_refused(home: Path) -> None:
    research_team()  # its analysts have no playbook: no usable runtime
    made = teamflow("task", "create", TEAM, "--title", "anyone")
    task_id = made.stdout.strip()
    ran = teamflow("task", "run", task_id)
    assert ran.returncode == 1
    assert "has no assignee and team 'research-team' has no idle active member" in ran.stderr
    assert get_task(task_id).status == "pending"
