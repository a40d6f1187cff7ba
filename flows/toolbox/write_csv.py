"""Built-in tool `write_csv`: writes a list of objects as a CSV file, creating its folders.

stdin: {"path": "artifacts/analysis.csv", "rows": [{...}, ...], "columns": ["a", "b"]?}
stdout: {"path": "/abs/artifacts/analysis.csv", "rows": 12, "columns": ["a", "b"]}

The columns are `columns` if given, else the keys of the rows in first-seen order; values
that are objects or lists are written as JSON. `path` is declared written
(`x-teamflow-writes`), so a read-only resource cannot be its target.
"""

import csv
import json
from pathlib import Path

from _common import answer, fail, params


def main() -> None:
    given = params()
    rows = given["rows"]
    columns = list(given.get("columns") or [])
    if not columns:
        for row in rows:
            columns += [key for key in row if key not in columns]
    path = Path(given["path"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as f:
            out = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            out.writeheader()
            for row in rows:
                out.writerow(
                    {k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in row.items()}
                )
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}")
    answer({"path": str(path.resolve()), "rows": len(rows), "columns": columns})


if __name__ == "__main__":
    main()
