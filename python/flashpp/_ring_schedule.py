"""Ring attention's schedule: which rows and columns each ring step computes, and the zigzag
split of a sequence. Pure Python (no numpy, no torch), so the C++ tests and the Python tests
check the same rules; src/distributed/ring_schedule.hpp is the C++ twin of this file.

Ring: W ranks, rank r holds the queries, keys and values of its slice of the sequence. At step
s (0 <= s < W) rank r holds the K/V block of rank (r - s) mod W ("source"); K/V move from rank
r to rank r + 1 after every step.

Causal attention uses the zigzag split: the sequence is cut into 2W chunks of equal length c and
rank r holds chunks r and 2W-1-r (in that order: local rows [0, c) are chunk r, [c, 2c) are
chunk 2W-1-r). Every step then costs the same (n = 2c local rows):
  step 0 (own block):       all n queries against all n keys, causal (the local order is the
                            global order, so top-left causal on the local slice is exact);
  source < r:               all n queries against the source's first chunk (keys [0, c)),
                            no mask: both local chunks come after that chunk, and both come
                            before the source's second chunk (2W-1-source > 2W-1-r);
  source > r:               only the second local chunk (queries [c, n)) against all n keys,
                            no mask: chunk r comes before both source chunks, chunk 2W-1-r
                            after both.
That is n*c query-key pairs per step, the causal block's n*n/2 included. Without causal the
split may be anything of equal lengths and every step is the full block.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    """Local query rows [q0, q1) against rows [k0, k1) of the K/V block held, causal or not."""

    q0: int
    q1: int
    k0: int
    k1: int
    causal: bool


def source_rank(world: int, rank: int, step: int) -> int:
    """The rank whose K/V block rank `rank` holds at `step`."""
    return (rank - step) % world


def check_ring(world: int, rank: int, n_local: int, causal: bool) -> None:
    if world < 1:
        raise ValueError(f"flashpp.distributed: world size: expected >= 1, got {world}")
    if not 0 <= rank < world:
        raise ValueError(f"flashpp.distributed: rank: expected 0 <= rank < {world}, got {rank}")
    if causal and n_local % 2:
        raise ValueError(
            "flashpp.distributed: causal ring attention holds two zigzag chunks per rank: the "
            f"local sequence length must be even, got {n_local}")


def piece(world: int, rank: int, step: int, n_local: int, causal: bool) -> Piece:
    """What rank `rank` computes at ring step `step` (see the module docstring)."""
    if not causal:
        return Piece(0, n_local, 0, n_local, False)
    half = n_local // 2
    if step == 0:
        return Piece(0, n_local, 0, n_local, True)
    if source_rank(world, rank, step) < rank:
        return Piece(0, n_local, 0, half, False)
    return Piece(half, n_local, 0, n_local, False)


def zigzag_chunks(world: int, rank: int) -> tuple[int, int]:
    """The two chunks (of 2*world) that rank holds, in local order."""
    return rank, 2 * world - 1 - rank


def zigzag_positions(seq_len: int, world: int, rank: int) -> list[int]:
    """Global sequence positions of rank's local rows, in local order."""
    if seq_len % (2 * world):
        raise ValueError(
            f"flashpp.distributed: zigzag split: the sequence length ({seq_len}) must be a "
            f"multiple of 2 * world size ({2 * world})")
    c = seq_len // (2 * world)
    first, second = zigzag_chunks(world, rank)
    return list(range(first * c, (first + 1) * c)) + list(range(second * c, (second + 1) * c))


def zigzag_order(seq_len: int, world: int) -> list[int]:
    """Global positions of the ranks' local rows concatenated (rank 0's first): the gather
    order. zigzag_unsplit puts element i of the concatenation at position order[i]."""
    return [p for r in range(world) for p in zigzag_positions(seq_len, world, r)]
