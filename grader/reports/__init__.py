"""Reports built from grading results: report.json, Gradescope, JUnit, the summary table, the gradebook."""
