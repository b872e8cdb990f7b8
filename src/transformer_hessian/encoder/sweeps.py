"""How the rows of H are divided into sweeps, and how the sweeps run.

:func:`tangent_blocks` splits the selected parameters into blocks of tangents (rows of H), in the
order of the graph; :func:`sweep` runs one block through the batch, chunk by chunk;
:func:`run_blocks` runs all blocks, on worker threads when asked; :func:`fill_transposes` copies the
columns a block's sweep did not reach from the earlier sweeps' rows.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from .graph import chunk_hessian
from .ops import Hess, Slot

#: a factored block (one unit tangent per row of a Linear weight, ops.Hess) holds at most this many
#: times ``tangent_block`` rows of H: its sums over rows are products as large as its rows times the
#: columns, which bounds their temporaries to this many times a dense block's
FACTORED_ROWS = 32


def graph_order(graph: tuple[dict, dict], slots: dict, keys: dict, factored: bool) -> tuple[dict, dict]:
    """(name -> graph position of its operation, name -> the row ranges swept factored) from
    :func:`.graph.graph_ranks` (``factored=False``: none).

    The sweeps take the parameters in the order of the graph: a sweep whose tangents start at
    graph position r runs forward from r and back to r only (graph.Tape.backward), and the
    columns of the parameters before r are the transposed rows of the earlier sweeps."""
    ranks, row_local = graph
    rank = {n: ranks[id(slots[k])] for n, k in keys.items()}
    return rank, {n: row_local[id(slots[k])] for n, k in keys.items() if factored and id(slots[k]) in row_local}


def tangent_blocks(names: list[str], named: dict, cols: dict, limit: int, factored=None) -> list[list[tuple]]:
    """Split the selected parameters, taken in the order of ``names``, by whole rows (first index)
    into blocks of at most ``limit`` tangents (a row longer than that is a block of its own): per
    block its pieces (name, local tangent range, a0, a1, rows of H), a piece being rows a0..a1 of
    one parameter. The row ranges ``factored[name]`` (a0, a1, kind) of a Linear weight (swept with
    a few unit tangents, :class:`.ops.Hess`: one per row, or for kind "keys" one per column) get
    blocks of their own, within one range each and of at most ``FACTORED_ROWS * limit`` rows of H;
    its other rows are blocks as above."""
    blocks, cur, n, factored = [], [], 0, factored or {}
    for name in names:
        p = named[name]
        rs, R = _row_size(p), (p.shape[0] if p.dim() else 1)
        ranges, dense, a = sorted(factored.get(name, [])), [], 0
        blocks += [cur] if cur and ranges else []
        cur, n = ([], 0) if ranges else (cur, n)
        for r0, r1, kind in ranges:
            dense += [(a, r0)] if r0 > a else []
            step, a = max(1, FACTORED_ROWS * limit // rs), r1
            for a0 in range(r0, r1, step):
                a1, start = min(r1, a0 + step), cols[name].start
                units = slice(0, rs if kind == "keys" else a1 - a0)
                blocks.append([(name, units, a0, a1, slice(start + a0 * rs, start + a1 * rs))])
        for a, end in [*dense, (a, R)]:  # noqa: B020 (the list is built first)
            while a < end:
                room = (limit - n) // rs
                if room <= 0 and cur:
                    blocks.append(cur)
                    cur, n = [], 0
                    continue
                take = min(end - a, max(room, 1))
                start = cols[name].start + a * rs
                cur.append((name, slice(n, n + take * rs), a, a + take, slice(start, start + take * rs)))
                n += take * rs
                a += take
    if cur:
        blocks.append(cur)
    return blocks


def factored_kind(pieces: list, factored: dict) -> str | bool:
    """The kind of the range of rows swept factored that holds a block of one piece
    (:func:`tangent_blocks`); False for any other block."""
    name, _, a0, a1, _ = pieces[0]
    kinds = [k for r0, r1, k in factored.get(name, []) if r0 <= a0 and a1 <= r1]
    return kinds[0] if len(pieces) == 1 and kinds else False


def per_sample_bytes(P: int, T: int, d: int, d_ff: int, nhead: int, n_layers: int, itemsize: int) -> int:
    """Tangent memory of one sample (P tangents), kept for the backward sweep, with a margin."""
    per_layer = T * (14 * d + 3 * d_ff) + 4 * nhead * T * T
    return 2 * P * itemsize * (per_layer * n_layers + 4 * T * d)


def _row_size(p: torch.Tensor) -> int:
    return p[0].numel() if p.dim() else 1


def sweep(spec, hess: Hess, slots: dict, keys: dict, pieces: list, inputs, targets, chunk: int, factored) -> None:
    """One block of tangents (``pieces``, :func:`tangent_blocks`) through the batch, chunk by chunk
    (factored when its rows are in a range of ``factored``, :func:`tangent_blocks`).

    The block's seeds live on its own copies of the slots and its rows on its own view of H, so
    blocks (disjoint rows of H) can be swept at the same time."""
    local = {k: Slot(s.value, s.cols) for k, s in slots.items()}
    for name, tangents, a0, a1, _ in pieces:
        local[keys[name]].seed = (tangents, a0, a1)
    view = hess.rows([(tangents, rows) for _, tangents, _, _, rows in pieces], factored_kind(pieces, factored))
    with torch.no_grad():  # grad mode is per thread
        for b0 in range(0, inputs.shape[0], chunk):
            chunk_hessian(spec, view, local, inputs[b0 : b0 + chunk].detach(), targets[b0 : b0 + chunk])


def columns(names: list[str], named: dict) -> dict[str, slice]:
    """name -> its columns of H (the flattened parameters one after the other, in ``names`` order)."""
    cols, off = {}, 0
    for n in names:
        cols[n] = slice(off, off + named[n].numel())
        off = cols[n].stop
    return cols


def check_workers(workers) -> None:
    """ValueError unless ``workers`` is None or a positive int."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"exact_hessian: workers must be a positive int or None, got {workers!r}")


def workers_and_threads(workers: int | None, device: torch.device, n_blocks: int) -> tuple[int, int]:
    """(blocks swept at the same time, intra-op threads of each; 0 = leave the caller's).

    Default: on a CPU one sweep per torch thread, each single-threaded (the sweep's kernels are
    small: two single-threaded sweeps beat one two-threaded sweep, docs/theory.md section 21); on
    other devices one sweep."""
    # read on the caller's thread before any worker sets its own: torch's thread count is set lazily,
    # and a thread that never asked for it would take a worker's setting
    threads = torch.get_num_threads()
    if workers is None:
        workers = threads if device.type == "cpu" else 1
    workers = max(1, min(workers, n_blocks))
    return workers, (max(1, threads // workers) if workers > 1 else 0)


def run_blocks(blocks: list, workers: int, threads: int, run) -> None:
    """``run(pieces)`` for every block: in order on one worker, else on ``workers`` threads with
    ``threads`` intra-op threads each (set once per worker thread)."""
    if workers == 1:
        for pieces in blocks:
            run(pieces)
        return
    pool = ThreadPoolExecutor(workers, "exact_hessian", initializer=torch.set_num_threads, initargs=(threads,))
    try:
        for job in [pool.submit(run, pieces) for pieces in blocks]:
            job.result()
    finally:  # an error (or Ctrl-C) drops the blocks not yet started
        pool.shutdown(wait=True, cancel_futures=True)


def fill_transposes(H: torch.Tensor, blocks: list, rank: dict, cols: dict) -> None:
    """H[block, p] = H[p, block]^T for every parameter p before a block's first graph position:
    the columns its sweep did not reach (the earlier sweep that holds p computed them as rows)."""
    for pieces in blocks:
        first = min(rank[name] for name, *_ in pieces)
        for n, r in rank.items():
            if r < first:
                for *_, rows in pieces:
                    H[rows, cols[n]] = H[cols[n], rows].T
