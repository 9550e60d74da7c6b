"""Load a topology file by extension (YAML or GraphML), parsed once per path, modification time and size."""

from __future__ import annotations

from pathlib import Path

from hierfl.config.files import display_path, read_cached
from hierfl.topology.fileformat import TopologyFileError, read_yaml
from hierfl.topology.graphml import read_graphml
from hierfl.topology.spec import TopologySpec

__all__ = ["load_topology_file"]


def _parse(p: Path) -> TopologySpec:
    where = display_path(p)
    if p.suffix.lower() in (".graphml", ".xml"):
        return read_graphml(p, where)
    if p.suffix.lower() in (".yaml", ".yml"):
        return read_yaml(p, where)
    raise TopologyFileError(f"{where}: unknown topology file type {p.suffix!r}; use .yaml/.yml or .graphml")


def load_topology_file(path: str | Path) -> TopologySpec:
    """Read and check a topology file (YAML or GraphML, by extension); cached by path and mtime.

    Raises :class:`TopologyFileError` whose message starts with ``file:line:``.
    """
    p = Path(path)
    try:
        return read_cached(p, _parse)
    except OSError as exc:
        raise TopologyFileError(f"{display_path(p)}: cannot read the file: {exc}") from None
