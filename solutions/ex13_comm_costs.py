"""ex13_comm_costs (bonus): what communication costs, with pen and paper, in code.

No devices and no JAX here: five small functions that estimate how long the four collectives and
data-parallel training take, following "How to Scale Your Model" (jax-ml.github.io/scaling-book),
Part 3 "Sharded Matrices and How to Multiply Them" and Part 5 "How to Parallelize a Transformer for
Training". The tests use the book's worked answers.

The model (the same for every collective function below):

- **A bidirectional ring.** The collective runs over one mesh axis of `n` devices joined in a ring
  with a wraparound link, and every device sends to both of its neighbours at once.
- **`nbytes`**: the size in bytes of the *whole* array along that ring, the book's V, that is `n`
  times one device's shard: the output of an all-gather, the (unreduced) input of a reduce-scatter,
  the array an all-reduce sums (each device holds one of that size), and, for an all-to-all, the
  array the `n` devices hold together (each holds `nbytes / n` before and after).
- **`bandwidth`**: bytes per second, the book's bidirectional W_ICI: what one device can send over
  its ring links in both directions together (half of it each way). A TPU v5p has 9e10 bytes/s
  each way, so `bandwidth=1.8e11`.
- **`latency`**: seconds per hop. A hop from a device to its neighbour never takes less than this,
  however few bytes it carries (the book's T_min, about 1e-6 s on TPUs).
- **Results** are seconds, as a plain Python number (a float; an int 0 is fine for "nothing to do"),
  not an array.
- **Bandwidth-bound or latency-bound.** A collective takes as long as the slower of its two limits:
  all its hops, one after another, at `latency` each; or all the bytes a device must take in, at
  `bandwidth`. (The book: each hop lasts max(T_min, its transfer time).)
- **The ring factor.** In an all-gather each device must receive the n - 1 shards it lacks, so
  (n - 1)/n of the array passes through its links. The book writes this factor and then drops it
  (V / W_ICI, the large-ring limit) in its worked answers; here it is kept, so a ring of 4 costs
  3/4 of the book's figure and a single device (n = 1) costs nothing at all.
- **Hops.** The farthest device on a ring of n is n // 2 hops away, so that is how many hops every
  collective here needs (the book writes ceil(n / 2), which is the same for the even rings it uses).

Every function's results are checked at rel_tol=1e-9 against this model, and against the book's
worked answers at the book's own rounding.

Grading: 10 bonus points. The visible tests 4: the book's worked answers (each also checks the same
function against the model on a ring drawn for it, in the same regime) and, of the properties below,
one device costing nothing on one array. The hidden tests 6: the model's values on many random
arrays, rings, bandwidths and latencies 3 (0.75 per collective); the hops of a latency-bound
collective, the book's latency threshold and dp_comm_bound_batch's constant 1.5; the model's
properties 1.5: one device costs nothing, more bytes or latency never cost less, more bandwidth
never costs more, an all-reduce is a reduce-scatter plus an all-gather, an all-to-all a quarter of
an all-gather, the units. Each property test first checks the value of the function it speaks about
on the same example, and earns only when that is right too: 0.0 everywhere has every property and
earns nothing.
"""


def allgather_time(nbytes, bandwidth, n, latency):
    """Seconds an all-gather of an array of `nbytes` bytes takes over a bidirectional ring of `n`
    devices, each moving `bandwidth` bytes/s (both directions together), each hop costing at least
    `latency` seconds. [A_X, B] -> [A, B]: `nbytes` is the gathered array, n times one shard.

    n = 1 costs 0. Example (the book's Part 3, Question 3): gathering a 256-byte array over a ring of
    4 TPU v4p (bandwidth 9e10, latency 1e-6) is latency-bound: 2 hops, 2e-6 s.
    Hint: count what one device must receive, and how many hops the farthest shard travels.
    """
    ### BEGIN SOLUTION
    hops = n // 2
    transfer = (n - 1) / n * nbytes / bandwidth
    return max(hops * latency, transfer)
    ### END SOLUTION


def reducescatter_time(nbytes, bandwidth, n, latency):
    """Seconds a reduce-scatter takes; same arguments and units as `allgather_time`.
    [A, B]{U_X} -> [A_X, B]: `nbytes` is the size of the unreduced array each device starts with
    (n times the shard each ends with).

    Hint: it is an all-gather run backwards (its transpose): the same hops carry the same bytes,
    summed on the way instead of kept.
    """
    ### BEGIN SOLUTION
    return allgather_time(nbytes, bandwidth, n, latency)
    ### END SOLUTION


def allreduce_time(nbytes, bandwidth, n, latency):
    """Seconds an all-reduce takes; same arguments and units as `allgather_time`.
    [A, B]{U_X} -> [A, B]: `nbytes` is the size of the array every device holds, before and after.

    Hint: an all-reduce is a reduce-scatter followed by an all-gather.
    """
    ### BEGIN SOLUTION
    return reducescatter_time(nbytes, bandwidth, n, latency) + allgather_time(
        nbytes, bandwidth, n, latency
    )
    ### END SOLUTION


def alltoall_time(nbytes, bandwidth, n, latency):
    """Seconds an all-to-all takes; same arguments and units as `allgather_time`.
    [A, B_X] -> [A_X, B]: `nbytes` is the whole array the n devices hold together (each holds
    nbytes / n before and after).

    On a bidirectional ring the book finds an all-to-all moves a quarter of what an all-gather of the
    same array moves (Part 3, Question 10): keep the all-gather's ring factor, divide its bandwidth
    time by 4. Its farthest block still travels n // 2 hops, so the latency bound is the all-gather's.
    """
    ### BEGIN SOLUTION
    hops = n // 2
    transfer = (n - 1) / n * nbytes / bandwidth / 4
    return max(hops * latency, transfer)
    ### END SOLUTION


def dp_comm_bound_batch(flops_per_s, bandwidth):
    """The per-device batch, in tokens, below which data-parallel training is communication-bound.

    flops_per_s: one device's compute, FLOP/s (the book's C). bandwidth: bytes/s over the data-parallel
    axis, bidirectional as above (the book's W_ICI; several axes add up). Both may be a whole pod's, when
    the data-parallel "devices" are pods joined by the data-center network (then W is the pod's DCN
    bandwidth). Returns a float: tokens per device (B / X in the book, B the global batch in tokens and X
    the number of data-parallel shards).

    The book's setting (Part 5, "Data Parallelism"): each weight matrix of P parameters is kept in bf16
    (2 bytes each); a matmul with it costs 2·P FLOPs per token; the backward pass runs two such matmuls
    per matrix, and then its 2P-byte gradient is all-reduced, an all-reduce costing 2·bytes / W_ICI (the
    large-ring limit: no (n - 1)/n here). Communication overlaps computation, so training is
    communication-bound when the all-reduce takes longer than the backward matmuls. Your answer is a
    constant times C / W_ICI: derive the constant (it is exact, nothing is rounded). Check: the book's
    TPU v5p (C = 4.59e14, W_ICI = 1.8e11) needs at least 2550 tokens per device.
    """
    ### BEGIN SOLUTION
    return flops_per_s / bandwidth
    ### END SOLUTION
