"""The term's late policy inside nbgrader: the plugin `nbgrader autograde` asks for each late notebook's penalty.

nbgrader 0.9.6's own LateSubmissionPlugin knows only "none" and "zero" (the whole score). Its
AssignLatePenalties preprocessor calls `plugin.late_submission_penalty(student_id, score, seconds_late)` for a
notebook whose submission is late: late against the gradebook's due date (with nbgrader's own extension for
that student, if any), from the submission's timestamp, which `nbgrader collect` writes to timestamp.txt and
autograde reads into the gradebook. TermLatePenalty answers with grader.course.term.LatePolicy's arithmetic,
the one grading applies: percent per day or hour started after the due date, at most cap, none within grace,
everything after zero_after. It reads the submission's timestamp and due date from the gradebook autograde has
open (zero_after is a moment, not a number of seconds late). `shardlab nbgrader build` writes its settings into
nbgrader_config.py from the course file's [late] table.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Enum, Float, Unicode

from grader.course import term


def _utc(moment: datetime) -> datetime:
    """nbgrader keeps times in UTC without a zone: the same moment, with its zone."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


class TermLatePenalty(LateSubmissionPlugin):
    """The course file's late policy, as nbgrader's late-submission plugin."""

    percent = Float(0.0, help="percent of the score taken off per day or hour started").tag(
        config=True
    )
    per = Enum(tuple(term.UNITS), default_value="day", help="day or hour").tag(config=True)
    cap = Float(100.0, help="never more than this percent").tag(config=True)
    grace_seconds = Float(0.0, help="a submission this late is on time").tag(config=True)
    zero_after = Unicode("", help="ISO 8601 with an offset: nothing counts after it").tag(
        config=True
    )

    def policy(self) -> term.LatePolicy:
        return term.LatePolicy(
            self.percent,
            self.per,
            self.cap,
            timedelta(seconds=self.grace_seconds),
            datetime.fromisoformat(self.zero_after) if self.zero_after else None,
        )

    def judge(self, student_id: str, seconds_late: float) -> term.Lateness:
        """The lateness of `student_id`'s submission of the assignment being autograded: its timestamp
        against its due date (nbgrader's extension included), read from the parent's gradebook."""
        parent = self.parent
        submission = parent.gradebook.find_submission(parent.assignment_id, student_id)
        due = _utc(submission.duedate)
        submitted = (
            _utc(submission.timestamp)
            if submission.timestamp is not None
            else due + timedelta(seconds=seconds_late)
        )
        return self.policy().judge(submitted, due, extended=submission.extension is not None)

    def late_submission_penalty(
        self, student_id: str, score: float, total_seconds_late: float
    ) -> float | None:
        late = self.judge(student_id, total_seconds_late)
        self.log.info("shardlab late policy for %s: %s", student_id, late.reason)
        return score * late.percent / 100


__all__ = ["TermLatePenalty"]
