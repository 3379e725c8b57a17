"""The double binary tree: a spanning tree each, and the two trees complement each other."""
import pytest

from pgas.host.collectives._trees import double_binary_tree


@pytest.mark.parametrize("n", range(1, 70))
def test_both_trees_span_every_rank_once(n):
    for t in (0, 1):
        nodes = [double_binary_tree(n, r)[t] for r in range(n)]
        roots = [r for r in range(n) if nodes[r].parent < 0]
        assert len(roots) == 1
        for r, node in enumerate(nodes):
            assert len(node.children) <= 2
            assert all(nodes[c].parent == r for c in node.children)
            if node.parent >= 0:
                assert r in nodes[node.parent].children
        reached, todo = {roots[0]}, [roots[0]]
        while todo:
            for child in nodes[todo.pop()].children:
                reached.add(child)
                todo.append(child)
        assert reached == set(range(n))


@pytest.mark.parametrize("n", [4, 8, 16, 64, 5, 9, 33])
def test_interior_in_at_most_one_tree(n):
    interior_twice = [r for r in range(n)
                      if all(tree.children for tree in double_binary_tree(n, r))]
    assert len(interior_twice) <= 1, interior_twice   # NCCL: at most one rank is inner in both


def test_eight_ranks_as_documented():
    table = {r: double_binary_tree(8, r) for r in range(8)}
    assert [(t0.parent, sorted(t0.children)) for t0, _ in table.values()] == [
        (-1, [4]), (2, []), (4, [1, 3]), (2, []), (0, [2, 6]), (6, []), (4, [5, 7]), (6, [])]
    assert [(t1.parent, sorted(t1.children)) for _, t1 in table.values()] == [
        (1, []), (3, [0, 2]), (1, []), (7, [1, 5]), (5, []), (3, [4, 6]), (5, []), (-1, [3])]
