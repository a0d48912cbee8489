"""What every layer of the grader shares: the typed result of a test, the options, the exception base."""
