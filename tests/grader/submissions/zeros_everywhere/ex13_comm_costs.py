"""ex13 that models nothing: every function returns 0.0. Zero is the right answer for one device, zero
plus zero is zero, and a constant is never decreasing, so every property the model has holds for it;
it must still earn nothing, since a property test pays only when the same function's values are right."""


def allgather_time(nbytes, bandwidth, n, latency):
    return 0.0


def reducescatter_time(nbytes, bandwidth, n, latency):
    return 0.0


def allreduce_time(nbytes, bandwidth, n, latency):
    return 0.0


def alltoall_time(nbytes, bandwidth, n, latency):
    return 0.0


def dp_comm_bound_batch(flops_per_s, bandwidth):
    return 0.0
