"""ex03 with one rule broken: column_sum first gathers every row of its columns onto each device
(an all-gather of x along "x") and then sums locally, instead of summing its own rows and combining
the partial sums (an all-reduce). Right values, right P("y") sharding, but each device receives whole
columns of x instead of one partial sum per column: only the all-reduce check must fail."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def sin_layer(x):
    return jax.jit(lambda x: 2 * jnp.sin(x) ** 2 + 1)(x)


@jax.jit
def _gather_then_sum(x):
    columns = NamedSharding(jax.typeof(x).sharding.mesh, P(None, "y"))
    return jnp.sum(jax.lax.with_sharding_constraint(x, columns), axis=0)


def column_sum(x):
    return _gather_then_sum(x)


def predict_add(spec_b, spec_c):
    def axes(e):
        return () if e is None else (e,) if isinstance(e, str) else tuple(e)
    out = []
    for b, c in zip(tuple(spec_b) + (None,) * (2 - len(spec_b)), tuple(spec_c) + (None,) * (2 - len(spec_c))):
        if axes(b) and axes(c) and axes(b) != axes(c):
            return None
        out.append(b if axes(b) else c)
    used = [a for e in out for a in axes(e)]
    return P(*out) if len(used) == len(set(used)) else None


def predict_matmul(spec_a, spec_b):
    def axes(e):
        return () if e is None else (e,) if isinstance(e, str) else tuple(e)
    (a0, a1), (b0, b1) = tuple(spec_a) + (None,) * (2 - len(spec_a)), tuple(spec_b) + (None,) * (2 - len(spec_b))
    used = axes(a0) + axes(b1)
    if (axes(a1) and axes(b0)) or len(used) != len(set(used)):
        return None
    return P(a0, b1)


def transpose_layout(x, mesh):
    return jax.reshard(x, NamedSharding(mesh, P("y", "x")))
