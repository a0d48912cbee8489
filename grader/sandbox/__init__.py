"""The sandbox a worker runs in: the confinement levels and their probe, what each level restricts, and the
launch, cgroups, seccomp filter and users that apply it. Imports nothing of the worker above it."""
