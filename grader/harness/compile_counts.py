"""The compile cache's hits and misses in a harness process (the cache itself: grader.grading.compile_cache)."""

from __future__ import annotations

# a miss: compiled and written
HIT, MISS = ("/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses")


class Counter:
    """Counts the cache's hits and misses in this process (jax's own "time saved" figure is not usable
    here: it is negative for the small programs the tests compile)."""

    def __init__(self):
        self.hits = self.misses = 0

    def install(self) -> Counter:
        import jax

        jax.monitoring.register_event_listener(self._event)
        return self

    def as_dict(self) -> dict:
        return {"hits": self.hits, "misses": self.misses}

    def _event(self, name: str, *args, **kwargs) -> None:
        if name == HIT:
            self.hits += 1
        elif name == MISS:
            self.misses += 1
