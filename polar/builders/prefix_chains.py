"""prefix_merging's chains (segments, tokens, members) and the radix-tree index of their views."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate

from polar.builders.base import Prepared
from polar.records import ChainBreak

__all__ = ["Chain", "ChainIndex", "ChainNode", "Segment", "Walk", "common_prefix"]


@dataclass(slots=True)
class Segment:
    """Never changed once made (chains split from one another share them): a repair replaces
    the segment."""

    view: list[int]
    """the tokens a prompt last showed here (for a response: sampled, or as re-rendered)"""
    sampled_by: Prepared | None = None
    """the call whose sampled response is here (this chain's or, in the first prompt of a
    chain split from another, that chain's); None for context"""


@dataclass(eq=False)
class Chain:
    trace_id: str
    attempt: int
    members: list[Prepared]
    segments: list[Segment]
    prompt: list[int]
    response: list[int]
    mask: list[int]
    logprobs: list[float]
    started_by: ChainBreak | None
    last_used: int
    repairs: list[ChainBreak] = field(default_factory=list)
    template_eos: int = 0
    ends: list[int] = field(default_factory=list)
    """where each segment ends in the view (the running sum of the segments' lengths)"""
    node: ChainNode | None = None
    """where the view ends in the attempt's `ChainIndex`"""

    def __post_init__(self) -> None:
        if len(self.ends) != len(self.segments):
            self.ends = list(accumulate(len(s.view) for s in self.segments))

    def append(self, item: Prepared, tail: list[int]) -> None:
        """Add `tail` (mask 0) and `item`'s sampled response (mask 1) to the chain."""
        if tail:
            self._add(Segment(list(tail)))
            self.response += tail
            self.mask += [0] * len(tail)
            self.logprobs += [0.0] * len(tail)
        self.members.append(item)
        self._add(Segment(list(item.response_ids), item))
        self.response += item.response_ids
        self.mask += [1] * len(item.response_ids)
        self.logprobs += item.logprobs

    def _add(self, segment: Segment) -> None:
        self.ends.append((self.ends[-1] if self.ends else 0) + len(segment.view))
        self.segments.append(segment)

    def repair(self, views: dict[int, list[int]]) -> None:
        """Show the segments at `views`' indexes as re-rendered there."""
        for index, view in views.items():
            self.segments[index] = Segment(view, self.segments[index].sampled_by)
        if views:
            first = min(views)
            start = self.ends[first - 1] if first else 0
            rest = accumulate((len(s.view) for s in self.segments[first:]), initial=start)
            self.ends[first:] = list(rest)[1:]


@dataclass(eq=False)
class ChainNode:
    """A node of a `ChainIndex`: the tokens on the edge into it, the chains whose view ends
    here."""

    label: list[int]
    depth: int
    """the length of the views that end here"""
    parent: ChainNode | None
    children: dict[int, ChainNode] = field(default_factory=dict)
    chains: list[Chain] = field(default_factory=list)


@dataclass
class Walk:
    """A prompt walked down a `ChainIndex` as far as it matches."""

    path: list[ChainNode]
    """the nodes whose views are prefixes of the prompt, from the root down"""
    partial: ChainNode | None
    """the child of the last path node whose edge the prompt left (or ended on) part-way"""
    depth: int
    """how far the prompt matches: the longest common prefix with any chain's view"""


class ChainIndex:
    """The views of one attempt's chains in a radix tree (a trie with whole runs of tokens on
    its edges).

    A prompt is walked down once: the chains on its path are those it extends, and the
    chains hanging off the path at a depth share exactly that many leading tokens with it,
    so chains are met in the order of their common prefix with the prompt without comparing
    the prompt with each.
    """

    def __init__(self) -> None:
        self.root = ChainNode(label=[], depth=0, parent=None)

    def walk(self, prompt: list[int]) -> Walk:
        node, depth, path = self.root, 0, [self.root]
        while depth < len(prompt):
            child = node.children.get(prompt[depth])
            if child is None:
                break
            label = child.label
            if prompt[depth : depth + len(label)] != label:
                return Walk(path, child, depth + common_prefix(prompt, depth, label))
            node, depth = child, depth + len(label)
            path.append(node)
        return Walk(path, None, depth)

    def groups(self, walk: Walk) -> Iterator[tuple[int, list[Chain]]]:
        """Chains that do not end on the walk's path, grouped by their common prefix with the
        prompt, with its length: the longest first."""
        if walk.partial is not None:
            yield walk.depth, _chains_under([walk.partial])
        on_path = walk.partial
        for node in reversed(walk.path):
            yield node.depth, _chains_under([c for c in node.children.values() if c is not on_path])
            on_path = node

    def place(self, chain: Chain, view: list[int], walk: Walk) -> None:
        """Move `chain`'s mark to where `view` ends (`view` extends the walked prompt)."""
        node, depth = walk.path[-1], walk.path[-1].depth
        while depth < len(view):
            child = node.children.get(view[depth])
            if child is None:
                child = ChainNode(label=view[depth:], depth=len(view), parent=node)
                node.children[view[depth]] = child
                node, depth = child, len(view)
                break
            k = common_prefix(view, depth, child.label)
            if k < len(child.label):
                child = self._split(child, k)
            node, depth = child, depth + k
        old = chain.node
        if old is node:
            return
        node.chains.append(chain)
        chain.node = node
        if old is not None:
            old.chains.remove(chain)
            self._tidy(old)

    def _split(self, node: ChainNode, at: int) -> ChainNode:
        """Put a node `at` tokens into `node`'s edge; return it."""
        parent = node.parent
        assert parent is not None
        middle = ChainNode(label=node.label[:at], depth=parent.depth + at, parent=parent)
        parent.children[middle.label[0]] = middle
        node.label = node.label[at:]
        node.parent = middle
        middle.children[node.label[0]] = node
        return middle

    def _tidy(self, node: ChainNode) -> None:
        """Drop a node no view ends at or below; fold a node into its only child."""
        parent = node.parent
        if parent is None or node.chains:
            return
        if not node.children:
            del parent.children[node.label[0]]
            self._tidy(parent)
        elif len(node.children) == 1:
            (child,) = node.children.values()
            child.label = node.label + child.label
            child.parent = parent
            parent.children[child.label[0]] = child


def _chains_under(nodes: list[ChainNode]) -> list[Chain]:
    found: list[Chain] = []
    while nodes:
        node = nodes.pop()
        found += node.chains
        nodes += node.children.values()
    return found


def common_prefix(prompt: list[int], start: int, view: list[int], chunk: int = 256) -> int:
    """How many leading tokens of `view` `prompt` repeats from `start` (compared a chunk at a
    time, then token by token inside the first chunk that differs)."""
    n = min(len(prompt) - start, len(view))
    if prompt[start : start + n] == view[:n]:
        return n
    i = 0
    while i + chunk < n and prompt[start + i : start + i + chunk] == view[i : i + chunk]:
        i += chunk
    while i < n and prompt[start + i] == view[i]:
        i += 1
    return i
