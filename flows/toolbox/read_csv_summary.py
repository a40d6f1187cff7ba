"""Built-in tool `read_csv_summary`: the columns and row count of a CSV file.

stdin: {"path": "data/q4-sales.csv"}
stdout: {"path": "...", "columns": ["date", ...], "row_count": 4416}
"""

from _common import answer, params, read_rows


def main() -> None:
    path = params()["path"]
    columns, rows = read_rows(path)
    answer({"path": path, "columns": columns, "row_count": len(rows)})


if __name__ == "__main__":
    main()
