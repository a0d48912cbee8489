"""ex03 written from the exercise contract alone (the docstrings), another way than the reference: sin_layer through the
identity 2 sin(x)^2 + 1 = 2 - cos(2x), column_sum as a matmul with a row of ones, the predictions by
asking JAX itself (jax.eval_shape on sharded ShapeDtypeStructs, None when it raises), and the new
layout with device_put instead of jax.reshard."""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding


@jax.jit
def _sin_layer(x):
    return 2 - jnp.cos(2 * x)


@jax.jit
def _column_sum(x):
    return jnp.ones((x.shape[0],), x.dtype) @ x


def sin_layer(x):
    return _sin_layer(x)


def column_sum(x):
    return _column_sum(x)


def _ask_jax(op, spec1, shape1, spec2, shape2):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2,
                         devices=jax.devices()[:8])
    args = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
            for spec, shape in ((spec1, shape1), (spec2, shape2))]
    try:
        with jax.set_mesh(mesh):
            return jax.eval_shape(op, *args).sharding.spec
    except Exception as exc:
        if type(exc).__name__ == "ShardingTypeError":
            return None
        raise


def predict_add(spec_b, spec_c):
    return _ask_jax(jnp.add, spec_b, (16, 16), spec_c, (16, 16))


def predict_matmul(spec_a, spec_b):
    return _ask_jax(jnp.matmul, spec_a, (16, 32), spec_b, (32, 8))


def transpose_layout(x, mesh):
    return jax.device_put(x, NamedSharding(mesh, jax.P("y", "x")))
