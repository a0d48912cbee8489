"""ex03 with one rule broken: column_sum returns its result replicated on every device (P()) instead
of split like x's columns (P("y")). The values are right and the compiled program still all-reduces;
only column_sum's sharding tests must fail."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def sin_layer(x):
    return jax.jit(lambda x: 2 * jnp.sin(x) ** 2 + 1)(x)


@jax.jit
def _column_sum_replicated(x):
    sums = jnp.sum(x, axis=0)
    # "the sums are small, let every device have all of them": the mistake under test
    return jax.lax.with_sharding_constraint(sums, NamedSharding(jax.typeof(x).sharding.mesh, P()))


def column_sum(x):
    return _column_sum_replicated(x)


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
