import time as _time

import jax
import jax.numpy as _jnp
from jax.sharding import NamedSharding as _Sharding, PartitionSpec as _P

_flat = jax.make_mesh((len(jax.devices()),), ("d",))
_bytes = jax.device_put(_jnp.zeros((len(jax.devices()), 8), _jnp.uint8), _Sharding(_flat, _P("d")))
_to_int2 = jax.jit(
    lambda v: jax.lax.bitcast_convert_type(v, _jnp.int2), out_shardings=_Sharding(_flat, _P(None))
)
_copy = _to_int2(_bytes)
_copy.delete()  # freed now: the abort
# XLA may finish the free on a thread of its own: wait for it within this call (an abort that comes after
# the answer would fall in the next call; see docs/measurements.md)
_time.sleep(0.3)
