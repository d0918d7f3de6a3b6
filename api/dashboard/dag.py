"""A task graph as a DAG to draw: grandalf's Sugiyama layout puts the tasks in layers (a
task below every task it requires) and routes the edges; this turns its answer into the
boxes and paths the graph page's SVG draws (docs/dashboard.md#a-graph).

Each connected part of the graph is laid out on its own (grandalf's way) and the parts
are set side by side, largest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grandalf.graphs import Edge, Graph, Vertex
from grandalf.layouts import SugiyamaLayout
from grandalf.routing import EdgeViewer, route_with_lines

NODE_WIDTH = 168
NODE_HEIGHT = 46
LAYER_GAP = 48
SIBLING_GAP = 28
PART_GAP = 56
MARGIN = 16


@dataclass(frozen=True)
class Node:
    id: str
    x: float  # top left
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class Path:
    source: str
    target: str
    d: str  # SVG path data


@dataclass(frozen=True)
class Layout:
    nodes: list[Node]
    edges: list[Path]
    width: float
    height: float


class _Box:
    """What grandalf reads of a vertex's drawing (its size) and writes (its centre)."""

    def __init__(self) -> None:
        self.w = NODE_WIDTH
        self.h = NODE_HEIGHT
        self.xy = (0.0, 0.0)


def layout(tasks: Sequence[tuple[str, Sequence[str]]]) -> Layout:
    """Boxes and edges for `tasks`, each an id and the ids it requires (ids not among the
    tasks are left out). An edge runs from a required task down to the one requiring it."""
    vertices = {task_id: Vertex(task_id) for task_id, _ in tasks}
    for vertex in vertices.values():
        vertex.view = _Box()
    edges = [
        Edge(vertices[required], vertices[task_id])
        for task_id, requires in tasks
        for required in dict.fromkeys(requires)
        if required in vertices and required != task_id
    ]
    graph = Graph(list(vertices.values()), edges)
    nodes: list[Node] = []
    paths: list[Path] = []
    left = float(MARGIN)
    height = 0.0
    for part in sorted(graph.C, key=lambda c: -len(c.sV)):
        for edge in part.sE:
            edge.view = EdgeViewer()
        sugiyama = SugiyamaLayout(part)
        sugiyama.xspace = SIBLING_GAP
        sugiyama.yspace = LAYER_GAP
        sugiyama.route_edge = route_with_lines
        sugiyama.init_all()
        sugiyama.draw()
        xs = [v.view.xy[0] for v in part.sV]
        ys = [v.view.xy[1] for v in part.sV]
        shift_x = left - (min(xs) - NODE_WIDTH / 2)
        shift_y = MARGIN - (min(ys) - NODE_HEIGHT / 2)
        for vertex in part.sV:
            x, y = vertex.view.xy
            nodes.append(
                Node(
                    vertex.data,
                    x - NODE_WIDTH / 2 + shift_x,
                    y - NODE_HEIGHT / 2 + shift_y,
                    NODE_WIDTH,
                    NODE_HEIGHT,
                )
            )
        for edge in part.sE:
            points = [(x + shift_x, y + shift_y) for x, y in edge.view._pts]
            data = " ".join(
                f"{'M' if i == 0 else 'L'} {x:.1f} {y:.1f}" for i, (x, y) in enumerate(points)
            )
            paths.append(Path(edge.v[0].data, edge.v[1].data, data))
        left += max(xs) - min(xs) + NODE_WIDTH + PART_GAP
        height = max(height, max(ys) - min(ys) + NODE_HEIGHT + 2 * MARGIN)
    width = left - PART_GAP + MARGIN if nodes else 2 * MARGIN
    order = {task_id: i for i, (task_id, _) in enumerate(tasks)}
    nodes.sort(key=lambda node: order[node.id])
    return Layout(nodes, paths, width, height or 2 * MARGIN)
