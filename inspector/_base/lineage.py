"""Where a node of a transformed graph comes from: the name of the exported program's node at the end of its
``from_node`` chain. Every graph this package compares (stage graphs, the lowering's, the delegate's) is aligned to the
exported program by it; it sits on the ground floor so that the cost, below the sites, reads it too."""

from __future__ import annotations

from torch.fx import Node


def source_name(node: Node) -> str:
    """The name of the node of the exported program this node comes from (the first ancestor in its ``from_node``
    chain, following each step's last source), or its own name."""
    chain = node.meta.get("from_node") or []
    if not chain:
        return node.name
    source = chain[-1]
    while getattr(source, "from_node", None):
        source = source.from_node[-1]
    return getattr(source, "name", None) or node.name


__all__ = ["source_name"]
