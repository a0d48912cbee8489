"""ex06 with case3_reducescatter done as an all-reduce then a slice: the right values and layout, but an
all-reduce where a reduce-scatter belongs. Everything else is right."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def _mm(a, b):
    return jnp.einsum("ij,jk->ik", a, b)


def case1_local(A, B, mesh):
    f = jax.shard_map(_mm, mesh=mesh, in_specs=(P("x"), P(None, "y")), out_specs=P("x", "y"))
    return f(A, B)


def case2_allgather(A, B, mesh):
    def body(a, b):
        whole = jax.lax.all_gather(a.T, "x", tiled=True).T   # gather the columns as rows
        return _mm(whole, b)
    return jax.shard_map(body, mesh=mesh, in_specs=(P(None, "x"), P()), out_specs=P(), check_vma=False)(A, B)


def case3_allreduce(A, B, mesh):
    def body(a, b):
        return jax.lax.psum(_mm(a, b), ("x",))
    return jax.shard_map(body, mesh=mesh, in_specs=(P(None, "x"), P("x")), out_specs=P())(A, B)


def case3_reducescatter(A, B, mesh):
    n = mesh.shape["x"]

    def body(a, b):
        total = jax.lax.psum(_mm(a, b), "x")          # all of C on every device...
        rows = total.shape[0] // n
        return jax.lax.dynamic_slice_in_dim(total, jax.lax.axis_index("x") * rows, rows)   # ...keep 1/|x|
    return jax.shard_map(body, mesh=mesh, in_specs=(P(None, "x"), P("x")), out_specs=P("x"))(A, B)


def case4_allgather(A, B, mesh):
    def body(a, b):
        cols = jax.lax.all_gather(b, "x")                      # (n, J, K/n)
        whole = jnp.concatenate(list(cols), axis=1)
        return _mm(a, whole)
    return jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P(None, "x")), out_specs=P("x"))(A, B)
