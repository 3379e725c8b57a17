"""NCCL's double binary tree over the ranks 0..n-1 of a team.

Tree 0 is a binary tree in which rank r's level is the lowest set bit of r: odd ranks
are leaves, rank 0 is the root with one child (the largest power of two below n), and
every other rank r with lowest bit b has parent ``(r ^ b) | (b << 1)`` (or ``r ^ b`` when
that is past the end) and children ``r - b/2`` and ``r + b/2`` (the latter shrunk until
it is in range). Tree 1 is the same tree over relabelled ranks: mirrored
(``r -> n-1-r``) when n is even, shifted (``r -> r-1 mod n``) when n is odd. Then
nearly every rank is a leaf in one tree and an interior node in the other, so each
rank sends and receives about one half of the data per tree direction, and both
directions of every link carry data.

For 8 ranks (parent <- rank -> children)::

    rank  tree 0: parent  children    tree 1 (mirrored): parent  children
     0            -       4                              1       -
     1            2       -                              3       0, 2
     2            4       1, 3                           1       -
     3            2       -                              7       1, 5
     4            0       2, 6                           5       -
     5            6       -                              3       4, 6
     6            4       5, 7                           5       -
     7            6       -                              -       3
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TreeNode", "binary_tree", "double_binary_tree"]


@dataclass(frozen=True)
class TreeNode:
    """One rank's place in a tree: its parent (-1 at the root) and children."""

    parent: int
    children: tuple[int, ...]


def _lowest_bit(rank: int, n: int) -> int:
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    return bit


def binary_tree(n: int, rank: int) -> TreeNode:
    """Rank ``rank``'s node in tree 0 over ``n`` ranks (see the module's description)."""
    bit = _lowest_bit(rank, n)
    if rank == 0:
        return TreeNode(-1, (bit >> 1,) if n > 1 else ())
    parent = (rank ^ bit) | (bit << 1)
    if parent >= n:
        parent = rank ^ bit
    half = bit >> 1
    children = []
    if half:
        children.append(rank - half)
        while half and rank + half >= n:
            half >>= 1
        if half:
            children.append(rank + half)
    return TreeNode(parent, tuple(children))


def double_binary_tree(n: int, rank: int) -> tuple[TreeNode, TreeNode]:
    """Rank ``rank``'s nodes in tree 0 and tree 1 over ``n`` ranks."""
    first = binary_tree(n, rank)
    if n % 2 == 0:
        to_label = from_label = lambda r: n - 1 - r           # noqa: E731 (mirror)
    else:
        to_label = lambda r: (r - 1) % n                        # noqa: E731 (shift)
        from_label = lambda r: (r + 1) % n                      # noqa: E731
    mirrored = binary_tree(n, to_label(rank))
    second = TreeNode(-1 if mirrored.parent < 0 else from_label(mirrored.parent),
                      tuple(from_label(c) for c in mirrored.children))
    return first, second
