"""ex13 answered by an object that says it equals anything: a float subclass whose comparisons are all
true (and whose value is NaN). In the test's own process (`shardlab check`) it reaches the assertions, which
must check the type before comparing; through the grading worker only plain numbers cross, so there it
arrives as the plain NaN it holds. Either way it must lose every test."""

import sys


class _EqualToAnything(float):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __le__ = __ge__ = __lt__ = __gt__ = __eq__
    __hash__ = float.__hash__


def _answer():
    main = sys.modules.get("__main__")
    in_worker = getattr(getattr(main, "__spec__", None), "name", "") == "grader.worker.request_loop"
    return float("nan") if in_worker else _EqualToAnything("nan")


def allgather_time(nbytes, bandwidth, n, latency):
    return _answer()


def reducescatter_time(nbytes, bandwidth, n, latency):
    return _answer()


def allreduce_time(nbytes, bandwidth, n, latency):
    return _answer()


def alltoall_time(nbytes, bandwidth, n, latency):
    return _answer()


def dp_comm_bound_batch(flops_per_s, bandwidth):
    return _answer()
