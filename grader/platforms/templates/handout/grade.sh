#!/usr/bin/env bash
# Grade exercises/ with the visible tests and publish the score: the steps of the CI workflow
# (.github/workflows/grade.yml). Run them locally the same way, after `pip install -e .`:
#     bash .github/grade.sh [OUT]      # writes OUT/report.json (default graded/) and prints the score
# `shardlab grade` exits 0 whatever the score and 2 when the exercises cannot be read; set
# SHARDLAB_FAIL_UNDER=SCORE to make a lower score fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-graded}"

rm -f "$out/report.json"   # a report left by an earlier run must not be published as this one's
status=0
# --timing report: shared CI machines make timings noisy; the figures are still reported.
shardlab grade exercises --out "$out" --visible-only --timing report \
    ${SHARDLAB_FAIL_UNDER:+--fail-under "$SHARDLAB_FAIL_UNDER"} || status=$?
if [ -f "$out/report.json" ]; then
    python .github/grade_summary.py "$out/report.json"
else   # still publish a result: 0 points and why, rather than none (GitHub Classroom would show nothing)
    python .github/grade_summary.py --error "\`shardlab grade\` exited $status without a report: the error it printed says why"
fi
exit "$status"
