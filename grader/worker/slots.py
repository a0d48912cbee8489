"""Where arrays go in a tree of arguments or results: the Slots a traced call's layout holds in place of
its arrays, and the walk over plain trees (tuples, lists, dicts) that puts them there and takes them out."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    """The place of the i-th array in a traced call's arguments or results."""

    index: int


def map_leaves(tree, is_leaf, replacement):
    """`tree` (tuples, lists, dicts) with each leaf for which is_leaf holds swapped by replacement(leaf)."""
    if is_leaf(tree):
        return replacement(tree)
    if type(tree) in (tuple, list):
        return type(tree)(map_leaves(v, is_leaf, replacement) for v in tree)
    if type(tree) is dict:
        return {k: map_leaves(v, is_leaf, replacement) for k, v in tree.items()}
    return tree


def slots(tree):
    """The Slots in `tree`, in order."""
    if isinstance(tree, Slot):
        yield tree
    elif type(tree) in (tuple, list):
        for v in tree:
            yield from slots(v)
    elif type(tree) is dict:
        for v in tree.values():
            yield from slots(v)
