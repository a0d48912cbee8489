"""A jax.Array subclass that holds values on whatever sharding it is given, and says so."""

import jax
import numpy as _np


class _FakeArray(jax.Array):
    is_fully_addressable = True
    addressable_shards = ()

    def __init__(self, value, sharding):
        self._value, self._sharding = _np.asarray(value), sharding

    sharding = property(lambda self: self._sharding)
    shape = property(lambda self: self._value.shape)
    dtype = property(lambda self: self._value.dtype)
    ndim = property(lambda self: self._value.ndim)

    def __array__(self, dtype=None, copy=None):
        return self._value
