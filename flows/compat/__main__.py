"""`python -m flows.compat`: records the fingerprints of every patch's targets as installed
now in `flows/compat/_fingerprints.py`, and says which changed. Run it once the patches
that `tests/test_compat.py` names are re-checked on the new version (then `ruff format`)."""

from pathlib import Path

from flows.compat import FINGERPRINTS, PATCHES, fingerprint

HEADER = '''"""The fingerprints of the library parts `flows.compat`'s patches lean on, on the pinned
versions: path -> (sha256 of the normalised source, first 16 hex digits; signature).
Written by `python -m flows.compat`; `tests/test_compat.py` compares them with what is
installed."""

# ruff: noqa: E501

'''

paths = sorted({path for patch in PATCHES for path in patch.targets})
now = {path: fingerprint(path) for path in paths}
lines = [f"    {path!r}: {now[path]!r}," for path in paths]
text = HEADER + "FINGERPRINTS: dict[str, tuple[str, str | None]] = {\n" + "\n".join(lines) + "\n}\n"
Path(__file__).with_name("_fingerprints.py").write_text(text)
for path in paths:
    if FINGERPRINTS.get(path) != now[path]:
        print(f"recorded: {path}")
