"""ex06 -- the four matmul cases."""

import jax
from jax.sharding import PartitionSpec as P


def case1_local(A, B, mesh):
    return jax.shard_map(lambda a, b: a @ b, mesh=mesh, in_specs=(P("x", None), P(None, "y")),
                         out_specs=P("x", "y"))(A, B)


def case2_allgather(A, B, mesh):
    def body(a, b):
        return jax.lax.all_gather(a, "x", axis=1, tiled=True) @ b
    return jax.shard_map(body, mesh=mesh, in_specs=(P(None, "x"), P()), out_specs=P(), check_vma=False)(A, B)


def case3_allreduce(A, B, mesh):
    return jax.shard_map(lambda a, b: jax.lax.psum(a @ b, "x"), mesh=mesh, in_specs=(P(None, "x"), P("x", None)),
                         out_specs=P())(A, B)


def case3_reducescatter(A, B, mesh):
    # same as the all-reduce, then every device keeps its own rows
    def body(a, b):
        C = jax.lax.psum(a @ b, "x")
        rows = C.shape[0] // mesh.shape["x"]
        return jax.lax.dynamic_slice_in_dim(C, jax.lax.axis_index("x") * rows, rows)
    return jax.shard_map(body, mesh=mesh, in_specs=(P(None, "x"), P("x", None)), out_specs=P("x", None))(A, B)


def case4_allgather(A, B, mesh):
    def body(a, b):
        return a @ jax.lax.all_gather(b, "x", axis=1, tiled=True)
    return jax.shard_map(body, mesh=mesh, in_specs=(P("x", None), P(None, "x")), out_specs=P("x", None))(A, B)
