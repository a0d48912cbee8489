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
# the abort can come after the answer (glibc finds the heap corrupted when it next checks it): waited for
# here, so that it comes within this call (after_answering.py does not wait)
_time.sleep(0.3)
