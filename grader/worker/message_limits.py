"""How much may cross between the harness and a worker: the bounds checked on a message before it is parsed
and on a value before it is decoded."""

# Measured over a whole reference grading (jax 0.10.2, every exercise, both partitioners): the largest
# message either way is 32 KB, with under 1 KB of JSON outside strings, nested 16 deep; a worker sends
# 2.8 MB in all over the whole course. The bounds leave room for honest solutions that send more.
MAX_MESSAGE_BYTES = 16 << 20  # one message; a larger one is refused on its header, never read
MAX_STRUCTURE_BYTES = 1 << 20  # its JSON outside strings: bounds the objects parsing builds
MAX_DEPTH = 64  # levels of an encoded value
# brackets nested: an encoded level takes at most 3 (a dict's pairs)
MAX_JSON_DEPTH = 3 * MAX_DEPTH + 8
MAX_WORKER_BYTES = 64 << 20  # all the messages one worker may send the harness in its life

# Array element types that may cross: numbers and bools (no objects, no strings, no structured types).
DTYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    }
)
