"""The hostile corpus's cases are submissions, not tests: pytest must not collect in them, nor load the
conftest.py one of them ships (ships_conftest_and_site_hooks), which would make every report "passed"."""

collect_ignore_glob = ["*"]
