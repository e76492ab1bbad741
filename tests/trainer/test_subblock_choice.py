"""Which sub-block a replica group goes to under Ray (trainer/launch/subblocks.py): the choice, pure; the placement on a
real Ray cluster is test_ray_subblocks.py's."""

from __future__ import annotations

from trainer.launch.subblocks import SUBBLOCK_LABEL, UNKNOWN, Choice, RayNode, choose, fill, slots, subblock_of

from tests.warden.fakes import node

# -- the choice ------------------------------------------------------------------------------------


def nodes(**subblocks: list[int]) -> list[RayNode]:
    """Nodes named <sub-block><i> with the given free slots, per sub-block."""
    return [RayNode(f"{sb}{i}", sb, free) for sb, frees in subblocks.items() for i, free in enumerate(frees)]


def test_a_group_goes_to_the_fullest_subblock_that_holds_it_on_as_few_nodes_as_possible() -> None:
    # Two-node groups of 16 ranks on 8-GPU nodes: b (16 free) is fuller than a (24 free), so a stays whole.
    assert choose(nodes(a=[8, 8, 8], b=[8, 8]), 16, one_node=False) == Choice("b", ("b0",) * 8 + ("b1",) * 8)
    # Free slots spread over two sub-blocks never make a group: 8 + 8 fit, but not in one.
    assert choose(nodes(a=[8], b=[8]), 16, one_node=False) is None
    assert choose(nodes(a=[8, 0], b=[0, 8]), 16, one_node=False) is None
    # A group a node can hold goes on one node (STRICT_PACK's rule), in the fullest sub-block.
    assert choose(nodes(a=[8, 4], b=[8]), 4, one_node=True) == Choice("b", ("b0",) * 4)
    # A group one node holds: the emptiest node, so one node's loss takes as few groups as it can.
    assert choose(nodes(a=[8, 4, 8]), 4, one_node=True) == Choice("a", ("a0",) * 4)
    assert choose(nodes(a=[2, 1]), 1, one_node=True) == Choice("a", ("a0",))
    assert choose(nodes(a=[4, 4]), 8, one_node=True) is None  # 8 free in a, but on no one node
    # Largest nodes first, the rest on the node that fits it most tightly: a whole node stays free.
    assert fill(nodes(a=[8, 8, 2]), 10) == ["a0"] * 8 + ["a2"] * 2
    assert fill(nodes(a=[3, 3, 3]), 7) == ["a0"] * 3 + ["a1"] * 3 + ["a2"]
    # A cluster without topology is one domain: the group fits as before (on the nodes the choice names).
    assert choose(nodes(**{UNKNOWN: [1, 1, 1]}), 2, one_node=False) == Choice(UNKNOWN, ("0", "1"))
    # Equal room: the sub-block's name decides, so a replay chooses the same.
    assert choose(nodes(b=[2], a=[2]), 2, one_node=True) == Choice("a", ("a0", "a0"))


def test_free_slots_are_counted_in_whole_bundles_of_every_resource() -> None:
    one = {"CPU": 1.0, "GPU": 1.0, "meridian_trainer": 1.0}
    assert slots({"CPU": 200.0, "GPU": 8.0, "meridian_trainer": 8.0}, one) == 8
    assert slots({"CPU": 3.0, "GPU": 8.0, "meridian_trainer": 8.0}, one) == 3
    assert slots({"CPU": 200.0, "GPU": 8.0}, one) == 0  # a generator's node: no trainer role
    assert slots({"CPU": 1.5}, {"CPU": 1.0}) == 1


def test_a_nodes_subblock_is_its_label_or_none() -> None:
    assert subblock_of(node("gke-a", metadata={"labels": {SUBBLOCK_LABEL: "sb-0017"}})) == "sb-0017"
    assert subblock_of(node("gke-a")) == UNKNOWN
    assert subblock_of(node("gke-a", metadata={"labels": {SUBBLOCK_LABEL: "a/b"}})) == UNKNOWN  # not a label value
    assert subblock_of({"metadata": None}) == UNKNOWN
