import jax
import jax.numpy as _jnp
from jax.sharding import NamedSharding as _Sharding, PartitionSpec as _P

_flat = jax.make_mesh((len(jax.devices()),), ("d",))
_bytes = jax.device_put(_jnp.zeros((len(jax.devices()), 8), _jnp.uint8), _Sharding(_flat, _P("d")))
_to_int2 = jax.jit(
    lambda v: jax.lax.bitcast_convert_type(v, _jnp.int2), out_shardings=_Sharding(_flat, _P(None))
)
_to_int2(_bytes).delete()
# not waited for: the abort may come within this call, or after its answer (glibc finds the corrupted
# heap when it next checks it), within a later call
