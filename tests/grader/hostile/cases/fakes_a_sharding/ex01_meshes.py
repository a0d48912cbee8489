# ruff: noqa: F821 (_shared/fake_array.py, appended before this file, defines the names it uses)
import jax
from jax.sharding import NamedSharding


class _LyingSharding(NamedSharding):
    def is_equivalent_to(self, other, ndim):
        return True

    def __eq__(self, other):
        return True

    __hash__ = NamedSharding.__hash__


def place(x, mesh, spec):
    return _FakeArray(x, _LyingSharding(mesh, jax.sharding.PartitionSpec()))
