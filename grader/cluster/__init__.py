"""Runs of several processes (ex12): the run and its record, the local and srun launchers, the processes, the
grader's coordinator and gate, and the census of their connections. Above the worker, below the harness."""
