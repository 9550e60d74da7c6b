"""A run's hierarchy as the pictures show it: devices grouped under their leader.

``hierfl timeline`` and ``hierfl report`` both read it from here, so both draw the same groups
and take the same devices when there are more than they draw.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

__all__ = ["read_devices", "read_clusters", "device_groups", "pick_devices"]

Groups = list[tuple[str, list[int]]]


def _num(text: str) -> Any:
    """A CSV cell as int, float or text."""
    for kind in (int, float):
        try:
            return kind(text)
        except (TypeError, ValueError):
            pass
    return text


def read_devices(run_dir: Path) -> list[dict[str, Any]]:
    """``devices.csv`` as rows of numbers and text; empty without the file."""
    path = Path(run_dir) / "devices.csv"
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return [{k: _num(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def read_clusters(run_dir: Path) -> list[dict[str, Any]]:
    """``clusters.jsonl``'s records; a crashed run's cut last line is left out; empty without the file."""
    path = Path(run_dir) / "clusters.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a crashed run's last line
        if isinstance(rec, dict):
            out.append(rec)
    return out


def device_groups(clusters: list[dict[str, Any]], devices: list[dict[str, Any]]) -> tuple[Groups, str]:
    """The hierarchy as ``[(leader label, device ids)]`` and a sentence saying where it comes from.

    The first (initial) ``clusters.jsonl`` record when it is not flat; else the ``edge`` column of
    ``devices.csv``; else one group under the cloud (devices talk to the cloud directly).
    """
    ids = sorted(int(d["device"]) for d in devices if isinstance(d.get("device"), int))
    first = clusters[0] if clusters else None
    if first is not None and first.get("grouping") != "flat" and first.get("members"):
        leaders = first.get("leaders") or []
        groups = [(str(leaders[c]) if c < len(leaders) and leaders[c] is not None else f"cluster {c}",
                   sorted(int(d) for d in members)) for c, members in enumerate(first["members"])]
        more = len(clusters) - 1
        note = (f"groups as formed at t={float(first.get('t', 0.0)):g}s ({first.get('grouping')} grouping, "
                "from clusters.jsonl)")
        if more:
            note += f"; the run re-clustered {more} time{'s' * (more != 1)} after that (see clusters.jsonl)"
        grouped = {d for _, m in groups for d in m}
        loose = [d for d in ids if d not in grouped]
        if loose:
            groups.append(("not in any cluster", loose))
        return groups, note
    edges: dict[int, list[int]] = {}
    for d in devices:
        e = d.get("edge")
        if isinstance(e, int) and e >= 0 and isinstance(d.get("device"), int):
            edges.setdefault(e, []).append(int(d["device"]))
    if edges:
        groups = [(f"edge {e}", sorted(m)) for e, m in sorted(edges.items())]
        loose = [d for d in ids if all(d not in m for _, m in groups)]
        if loose:
            groups.append(("cloud (direct)", loose))
        return groups, "groups from the edge column of devices.csv"
    return [("cloud", ids)], "a flat run: every device talks to the cloud directly"


def pick_devices(groups: Groups, max_devices: int) -> Groups:
    """At most ``max_devices`` devices, taken round-robin over the groups (lowest ids first)."""
    picked: list[list[int]] = [[] for _ in groups]
    left = max_devices
    depth = 0
    while left > 0 and any(depth < len(m) for _, m in groups):
        for i, (_, members) in enumerate(groups):
            if left > 0 and depth < len(members):
                picked[i].append(members[depth])
                left -= 1
        depth += 1
    return [(label, sorted(p)) for (label, _), p in zip(groups, picked)]
