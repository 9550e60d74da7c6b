"""A hardened YAML reader for scenario files and ``--set`` values.

``yaml.safe_load`` has two traps for a configuration file (reliability):

* **duplicate keys** in one mapping are accepted silently, the last one winning, so a key set
  twice (an edit that forgot the first one) changes a run without a word;
* **alias expansion** is not limited: a "billion laughs" document of a few hundred bytes whose
  anchors refer to anchors describes 10⁹ nodes. PyYAML itself shares the aliased objects, but
  everything after it (merging ``extends``, validation, error messages) walks the expanded tree,
  and ``hierfl validate`` hung above 1 GB.

:func:`load_yaml` composes the document into a node graph first, counts the nodes the expanded
document would have (shared nodes once per reference, in time linear in the graph), refuses more
than :data:`MAX_NODES` or a recursive alias, and only then constructs it, with duplicate keys an
error naming both lines.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = ["load_yaml", "MAX_NODES", "YAMLLimitError"]

MAX_NODES = 1_000_000
"""Most nodes (scalars, lists, mappings) a document may have once its aliases are expanded.

A scenario has hundreds; inline lists (events, choice values) a few thousand. A million leaves
room for generated files while a bomb is refused in milliseconds.
"""


class YAMLLimitError(yaml.YAMLError):
    """A document too large once its aliases are expanded, or with a recursive alias."""

    def __init__(self, problem: str, mark: Any = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


# libyaml's parser where it is built in: the pure-Python one takes 16 s for a 5 MB value
_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BASE):  # type: ignore[misc, valid-type]
    """``SafeLoader`` whose mappings refuse a key given twice (merge keys ``<<`` may still be overridden)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:  # type: ignore[override]
        if isinstance(node, MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base`: the mapping's own keys override merged ones, as YAML says
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue  # reported by the base class as an unhashable key
                if key in seen:
                    first = seen[key]
                    raise ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"duplicate key {_short(key)!s} (first given on line {first.line + 1}); "
                        "each key may appear once in a mapping", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _short(key: Any, limit: int = 60) -> str:
    text = repr(key)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _expanded_size(root: Node, limit: int) -> int:
    """Nodes of the document with every alias expanded; raises past ``limit`` or on a cycle.

    Iterative (a deeply nested document must not exhaust Python's stack) and memoised by node
    identity, so a shared (aliased) node is sized once however often it is referenced.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            children = _children(node)
            total = 1 + sum(sizes[id(c)] for c in children)
            if total > limit:
                raise YAMLLimitError(f"the document expands to more than {limit:,} nodes through its aliases "
                                     "(&anchor/*alias); refusing to load it", node.start_mark)
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in active:
            raise YAMLLimitError("recursive alias: a node contains itself", node.start_mark)
        active.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml(text: str, max_nodes: int = MAX_NODES) -> Any:
    """Parse one YAML document like ``yaml.safe_load``, but with duplicate keys an error and the
    alias-expanded size bounded by ``max_nodes``. Raises ``yaml.YAMLError`` (with a mark)."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if not isinstance(node, ScalarNode):
            _expanded_size(node, max_nodes)
        return loader.construct_document(node)
    finally:
        loader.dispose()
