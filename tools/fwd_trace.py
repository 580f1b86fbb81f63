#!/usr/bin/env python3
"""Where an sm90 forward item's time goes: reads the clock stamps of a traced build.

Build with -DFLASHPP_SM90_FWD_TRACE=1 (src/cuda/sm90/forward/trace.cuh; `tools/object_variant.sh
BUILD OUT "-DFLASHPP_SM90_FWD_TRACE=1" 'sm90_fwd'` rebuilds all the sm90 forward objects, FP8's
included: a subset would break the parameters they share), run any forward call with
FLASHPP_SM90_FWD_TRACE_FILE=PATH
(the last launch's stamps are kept), then

    python3 tools/fwd_trace.py [--all] PATH [PATH...]

For each file: per consumer warpgroup, the mean cycles (SM clock) of each phase of an item, over
every traced item that is neither a block's first nor its last (those carry the launch and the
drain; --all takes every item, e.g. on a grid of one block per item, its time then running to
the end of its epilogue), and the item's fixed cost: its whole time minus its key tiles at the
steady step time.
Phases: wait Q (item start -> Q in shared memory), wait K0 (-> first K tile), wait turn (-> the
first issue turn), S0 (-> first S landed), softmax0 (-> first P), steps (the S(j) + P V(j-1)
loop; per tile in brackets), last PV (-> landed), epilogue (-> O stored), to next (-> next item's
start).
"""
import struct
import sys

PHASES = ["wait Q", "wait K0", "wait turn", "S0", "softmax0", "steps", "last PV", "epilogue",
          "to next"]


def load(path):
    with open(path, "rb") as f:
        head = struct.unpack("<5Q", f.read(40))
        blocks, items, roles, events, consumers = head
        words = struct.unpack("<%dQ" % (blocks * items * roles * events), f.read())
    def at(b, i, r, e):
        return words[((b * items + i) * roles + r) * events + e]
    return blocks, items, roles, events, consumers, at


def summarise(path, every=False):
    blocks, items, roles, events, consumers, at = load(path)
    print(f"== {path}: {consumers} consumer warpgroups")
    for r in range(1, consumers + 1):
        sums = [0.0] * len(PHASES)
        per_tile = fixed = whole = tiles_sum = 0.0
        n = 0
        for b in range(blocks):
            last = max((i for i in range(items) if at(b, i, r, 0) != 0), default=-1)
            # Neither the block's first item nor its last traced one, unless every=True.
            for i in (range(0, last + 1) if every else range(1, last)):
                e = [at(b, i, r, k) for k in range(events)]
                nxt = at(b, i + 1, r, 0) if i + 1 < items else 0
                tiles = e[9]
                if every and nxt == 0:
                    nxt = e[8]  # no next item: the item ends with its epilogue
                if tiles < 2 or 0 in e[:9] or nxt == 0:
                    continue
                d = [e[1] - e[0], e[2] - e[1], e[3] - e[2], e[4] - e[3], e[5] - e[4], e[6] - e[5],
                     e[7] - e[6], e[8] - e[7], nxt - e[8]]
                for k in range(len(PHASES)):
                    sums[k] += d[k]
                step = d[5] / (tiles - 1)
                per_tile += step
                whole += nxt - e[0]
                fixed += (nxt - e[0]) - tiles * step
                tiles_sum += tiles
                n += 1
        if n == 0:
            print(f"  consumer {r - 1}: no complete middle items traced")
            continue
        print(f"  consumer {r - 1}: {n} items, {tiles_sum / n:.1f} key tiles each, item "
              f"{whole / n:.0f} cycles, step {per_tile / n:.0f}, fixed cost {fixed / n:.0f} "
              f"({fixed / per_tile:.2f} steps)")
        print("    " + "  ".join(f"{p} {s / n:.0f}" for p, s in zip(PHASES, sums)))
        # Item time by its position in the block's walk, in groups of 8, and the blocks' spans
        # (first item's start to last traced item's epilogue): a drift along the walk shows here.
        by_pos, spans = {}, []
        for b in range(blocks):
            starts = [at(b, i, r, 0) for i in range(items)]
            ends = [at(b, i, r, 8) for i in range(items)]
            done = [i for i in range(items) if starts[i] and ends[i]]
            if not done:
                continue
            spans.append(ends[done[-1]] - starts[done[0]])
            for i in done:
                by_pos.setdefault(i // 8, []).append(ends[i] - starts[i])
        # The slowest blocks and the SMs they ran on (the producer's sm_id stamp).
        span_of = []
        for b in range(blocks):
            starts = [at(b, i, r, 0) for i in range(items)]
            ends = [at(b, i, r, 8) for i in range(items)]
            done = [i for i in range(items) if starts[i] and ends[i]]
            if done:
                span_of.append((ends[done[-1]] - starts[done[0]], len(done), at(b, 0, 0, 2), b))
        span_of.sort(reverse=True)
        if r == 1 and len(span_of) > 1:
            print("    slowest blocks (span, items, SM): " + ", ".join(
                f"{s / 1e6:.2f}M/{n}/SM{sm}" for s, n, sm, _ in span_of[:12]))
            print("    fastest blocks (span, items, SM): " + ", ".join(
                f"{s / 1e6:.2f}M/{n}/SM{sm}" for s, n, sm, _ in span_of[-6:]))
        print("    item start->epilogue end by position: " + "  ".join(
            f"{8 * g}-{8 * g + 7}: {sum(v) / len(v):.0f}" for g, v in sorted(by_pos.items())) +
            f"; block span mean {sum(spans) / len(spans):.0f}, max {max(spans):.0f}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--all"]
    if not args:
        print(__doc__)
        sys.exit(2)
    for p in args:
        summarise(p, every="--all" in sys.argv[1:])
