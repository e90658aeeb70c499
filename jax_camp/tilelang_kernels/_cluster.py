"""What the blocks of a thread-block cluster tell each other about a row they hold in parts.

A long row held over a cluster (``_rows.cluster_tile``) is split into parts, one a block, and
each block reduces its own part. The row's answer needs every part's, so each block stores its
part's few values into every block's shared memory (distributed shared memory, which sm_90 and
later GPUs give a cluster's blocks), the cluster waits for all, and each block combines the
parts in the same order, so that every block ends with the same numbers. These are the steps
every kernel of such rows takes; what a kernel stores and how it combines the parts is its own
(softmax.py's ``share_over_cluster`` pools (max, sum) pairs, ``sum_over_cluster`` below adds).
"""

import tilelang.language as T


@T.macro
def start_cluster(parts):
    """Clears ``parts`` and waits until every block of the cluster has started: a block
    may store into another's shared memory only once that block is running."""
    T.fill(parts, 0.0)
    T.sync_threads()
    T.cluster_arrive()
    T.cluster_wait()


@T.macro
def gather_over_cluster(mine, parts, slot, blocks, rank, count):
    """Stores this block's ``count`` values, ``mine[slot, :]`` in shared memory, into slot
    ``slot`` of every block's ``parts[slot, rank, :]``, one thread a (block, value), then
    waits for the whole cluster: after it, ``parts[slot, b, :]`` holds block b's values in
    every block. Kernels alternate two slots by row, so that a block storing the next row's
    values never overwrites ones a slower block is still reading."""
    T.sync_threads()
    t = T.get_thread_binding()
    if t < blocks * count:
        T.copy_cluster(mine[slot, t % count], parts[slot, rank, t % count], dst_block=t // count)
    T.cluster_sync()


@T.macro
def sum_over_cluster(total, mine, parts, slot, blocks, rank):
    """The row's sum from each block's: ``total`` (a fragment of one row) holds this block's
    part's sum coming in and the whole row's going out, the same in every block."""
    mine[slot, 0] = total[0]  # every thread stores the same value
    gather_over_cluster(mine, parts, slot, blocks, rank, 1)
    for i in T.Parallel(1):
        total[i] = 0.0
    for b in T.serial(blocks):
        for i in T.Parallel(1):
            total[i] += parts[slot, b, 0]
