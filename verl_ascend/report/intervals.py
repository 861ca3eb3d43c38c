"""Interval arithmetic on large event sets with numpy: union length, merged blocks, busy curves.

Why: free time and un-overlapped communication are measures of unions of millions of kernel or op
intervals. Sorting once and sweeping with cumulative maxima keeps it vectorised (no Python loop per
event) and the memory to a few arrays of the event count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Blocks:
    """Disjoint, sorted intervals (the union of some input intervals)."""

    starts: np.ndarray
    ends: np.ndarray

    @property
    def length(self) -> float:
        return float((self.ends - self.starts).sum()) if len(self.starts) else 0.0

    @property
    def first(self) -> float:
        return float(self.starts[0]) if len(self.starts) else float("nan")

    @property
    def last(self) -> float:
        return float(self.ends[-1]) if len(self.ends) else float("nan")


def merge(starts: np.ndarray, ends: np.ndarray) -> Blocks:
    """Union of [starts[i], ends[i]) as disjoint sorted blocks. Touching intervals merge."""
    if len(starts) == 0:
        empty = np.empty(0, dtype=np.float64)
        return Blocks(empty, empty.copy())
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = ends[order]
    del order
    np.maximum.accumulate(e, out=e)
    # A new block starts where an interval begins after everything before it has ended.
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.greater(s[1:], e[:-1], out=new[1:])
    first_idx = np.flatnonzero(new)
    last_idx = np.append(first_idx[1:] - 1, len(s) - 1)
    return Blocks(s[first_idx], e[last_idx])


def close_gaps(blocks: Blocks, gap: float) -> Blocks:
    """``blocks`` with every gap of at most ``gap`` filled: spans of activity instead of single ops
    (a host-op trace has a short gap between any two ops; a lane waiting for work has long ones)."""
    if len(blocks.starts) < 2 or gap <= 0:
        return Blocks(blocks.starts.copy(), blocks.ends.copy())
    new = np.empty(len(blocks.starts), dtype=bool)
    new[0] = True
    np.greater(blocks.starts[1:] - blocks.ends[:-1], gap, out=new[1:])
    first_idx = np.flatnonzero(new)
    last_idx = np.append(first_idx[1:] - 1, len(blocks.starts) - 1)
    return Blocks(blocks.starts[first_idx], blocks.ends[last_idx])


def union(*sets: Blocks) -> Blocks:
    """Union of several block sets."""
    sets = [b for b in sets if len(b.starts)]
    if not sets:
        empty = np.empty(0, dtype=np.float64)
        return Blocks(empty, empty.copy())
    return merge(np.concatenate([b.starts for b in sets]), np.concatenate([b.ends for b in sets]))


def intersect_length(a: Blocks, b: Blocks) -> float:
    """Measure of the intersection of two block sets: |A| + |B| - |A u B|."""
    if not len(a.starts) or not len(b.starts):
        return 0.0
    both = merge(np.concatenate([a.starts, b.starts]), np.concatenate([a.ends, b.ends]))
    return max(0.0, a.length + b.length - both.length)


def clip(blocks: Blocks, lo: float, hi: float) -> Blocks:
    """The part of ``blocks`` inside [lo, hi)."""
    if not len(blocks.starts) or hi <= lo:
        empty = np.empty(0, dtype=np.float64)
        return Blocks(empty, empty.copy())
    s = np.clip(blocks.starts, lo, hi)
    e = np.clip(blocks.ends, lo, hi)
    keep = e > s
    return Blocks(s[keep], e[keep])


def busy_curve(blocks: Blocks, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative busy time sampled at ``points`` evenly spaced times over [first, last].

    ``busy_between(curve, a, b)`` then answers "how long was this lane busy between a and b" with an
    error below one grid step, from a few thousand numbers instead of every block.
    """
    if not len(blocks.starts):
        return np.zeros(0), np.zeros(0)
    grid = np.linspace(blocks.first, blocks.last, max(int(points), 2))
    cum_end = np.cumsum(blocks.ends - blocks.starts)  # busy time up to the end of each block
    # For each grid time t: completed blocks before t contribute fully; the block containing t partly.
    idx = np.searchsorted(blocks.starts, grid, side="right") - 1  # last block starting at or before t
    done_before = np.where(idx > 0, cum_end[np.maximum(idx - 1, 0)], 0.0)
    inside = np.where(idx >= 0, np.clip(grid - blocks.starts[np.maximum(idx, 0)], 0.0,
                                        blocks.ends[np.maximum(idx, 0)] - blocks.starts[np.maximum(idx, 0)]), 0.0)
    return grid, done_before + inside


def busy_between(grid: np.ndarray, cum: np.ndarray, lo: float, hi: float) -> float:
    if not len(grid) or hi <= lo:
        return 0.0
    return float(np.interp(hi, grid, cum) - np.interp(lo, grid, cum))


def occupancy(grid: np.ndarray, cum: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Busy fraction per bin (for timeline plots): edges and values in [0, 1]."""
    if not len(grid):
        return np.zeros(0), np.zeros(0)
    edges = np.linspace(grid[0], grid[-1], bins + 1)
    c = np.interp(edges, grid, cum)
    width = np.diff(edges)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(width > 0, np.diff(c) / width, 0.0)
    return edges, np.clip(frac, 0.0, 1.0)
