"""What ex02's visible and hidden tests share: the check of shard_shape on a layout that divides."""

import pytest

BEFORE_ERRORS = "the error case is checked once this is right"


def _check_shard_shape(impl, global_shape, mesh_shape, spec, want, *, note=""):
    """Asserts impl.shard_shape(global_shape, mesh_shape, spec) == want on a layout whose every dimension
    divides. A ValueError there is a wrong answer, not a crash: shard_shape raises only where a layout
    does not divide, so a function that raises everywhere fails here, with this message."""
    call = f"shard_shape({tuple(global_shape)}, {dict(mesh_shape)}, {spec})"
    suffix = f" ({note})" if note else ""
    try:
        got = impl.shard_shape(tuple(global_shape), dict(mesh_shape), spec)
    except ValueError as exc:
        raise AssertionError(f"{call} raised ValueError, but every dimension divides and no mesh axis is used "
                             f"twice: expected {tuple(want)}{suffix}; got: {exc}") from None
    try:
        right = tuple(got) == tuple(want)
    except TypeError:   # not a sequence at all
        right = False
    assert right, f"{call}: expected {tuple(want)}, got {got!r}{suffix}"


@pytest.fixture
def check_shard_shape():
    """check_shard_shape(impl, global_shape, mesh_shape, spec, want, note=""): shard_shape on a valid layout."""
    return _check_shard_shape


@pytest.fixture
def before_errors():
    """The note an error test adds to its valid case's message."""
    return BEFORE_ERRORS
