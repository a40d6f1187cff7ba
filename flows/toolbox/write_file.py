"""Built-in tool `write_file`: writes text (or JSON) to a path, creating its folders.

stdin: {"path": "artifacts/report.md", "content": "..." | {...} | [...], "append": false}
stdout: {"path": "/abs/artifacts/report.md", "bytes": 1234}

Content that is not a string is written as indented JSON. The tool declares that `path` is
written (`x-teamflow-writes`), so a read-only resource cannot be its target.
"""

import json
from pathlib import Path

from _common import answer, fail, params


def main() -> None:
    given = params()
    content = given["content"]
    text = content if isinstance(content, str) else json.dumps(content, indent=2) + "\n"
    path = Path(given["path"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if given.get("append") else "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}")
    answer({"path": str(path.resolve()), "bytes": len(text.encode("utf-8"))})


if __name__ == "__main__":
    main()
