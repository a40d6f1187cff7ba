"""teamflow's data: wire formats, tables and their stores. Never imports Prefect or `flows`.

Layered bottom-up; a module imports only modules of lower layers (`tests/test_layers.py`
checks that no import, lazy ones included, closes a circle):

1. `base`, `wire_support`, `db`, `team_settings`, `limits`, `durations`, `embeddings` (text to
   vectors): import nothing of teamflow
2. `mirror` (the files beside the rows), `file_swap` (a new version of a file put in place,
   the one it replaced handed back), `tool`, `knowledge`, `api`, `schedule` (fire times),
   `chimera_response` (a step's `002` answer), `conversation` (`003` conversations, kept in
   the `001` messages table), `team_config` (a team's `004` `config.json` on the wire)
3. `team` (teams and members, rows only), `agent` (agent state, configurations, experience
   logs), `prompt_template` (versioned prompt templates and filling them in)
4. `task`, `task_status` (each member's `004` task-status.json), `memory` (what agents
   remember: the `001` Memory, its table and store)
5. `notification`, `dependencies` (tasks blocked by tasks), `memory_search` (full-text and
   vector search over memories)
6. `inbox_message` (the `004` entry and typed payloads on the wire), `inbox_table` (the rows
   and each inbox's counter), `inbox_files` (the `004` inbox files, both ways), `inbox` (the store)
7. `approval`, `shutdown`, `alert`, `status`
8. `presence` (team state, heartbeats; tells the lead of status changes), `plan_timeout`
   (the timeout policy of plan approvals, on teamflow's clock), `project` (projects, their
   milestones and the tasks placed in them)
9. `watchdog` (alarms once per condition: members offline, deadlines, dead runs)
10. `tables` (every table on one metadata; a team's rows)
11. `membership` (new teams and members, with their inboxes; deleting teams)
12. `backup`; `formats` (imports its models by name when it validates, none statically);
    `metric_frames` (what the metric queries share: time windows, read-only connections,
    DataFrames), `approval_metrics` and `metrics` (the metric queries: pandas DataFrames,
    pandas imported lazily)
"""
