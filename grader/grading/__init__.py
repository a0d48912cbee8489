"""The grading engine: submissions in, harness processes per exercise, results out; batches."""
