"""Where the course's trees live. Everything is found from the catalog's id, relative to the repo root."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
SOLUTIONS_DIR = REPO_ROOT / "solutions"
EXERCISES_DIR = REPO_ROOT / "exercises"
EXERCISE_TESTS_DIR = REPO_ROOT / "tests" / "exercises"
