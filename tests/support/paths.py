"""Where the tests' own files are: the repository, and the recorded data the tests read."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the directory of pyproject.toml).
REPO = Path(__file__).resolve().parents[2]
#: Recorded inputs of the unit tests (real captures, run directories, pinned dumps): tests/data.
TEST_DATA = REPO / "tests" / "data"
#: The fuzz targets, their kept corpus and seeds.
FUZZ = REPO / "tests" / "fuzz"
