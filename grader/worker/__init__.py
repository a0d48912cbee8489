"""The untrusted side: the worker process that runs a student's module, its confinement, and the protocol it speaks."""
