"""How the blocks of a thread-block cluster that hold one row between them share their sums.

A row too long for one block's registers can still be read from memory once if several blocks
hold it: on Hopper (sm_90) and later a launch groups blocks into clusters, whose blocks run at
the same time and can each write into the others' shared memory. A cluster tile
(``_rows.cluster_tile``) gives each block of a cluster one part of a row, which it reduces as
a resident tile reduces a whole row; then each block writes the few numbers its part reduced
to (softmax's maximum and sum, the backward's dot product) into every block of its cluster,
and, once all have arrived, every block combines all parts' numbers itself. No block waits
for another's result, and no global memory or second kernel is involved.

A kernel does three things, in order:

1. ``mine, parts = share_buffers(blocks, width)``, then ``start_sharing(parts)`` first thing:
   ``parts`` (blocks x width) receives every block's numbers, row ``part`` from the block of
   that rank. It is zeroed and published with the cluster barrier's arrival before anything
   else, so that TileLang's shared-memory planner, which sees only this block's own accesses,
   treats it as in use from the start and gives none of its bytes to another buffer (such as a
   reduction's scratch) while the other blocks may already be writing into it.
2. Its part's reduction, with the numbers to share stored into ``mine`` (width).
3. ``share(part, mine, parts)``: waits until every block of the cluster has arrived (so that
   its shared memory exists and is zeroed), writes ``mine`` into row ``part`` of each block's
   ``parts``, and waits at the barrier again until every block has written. Then ``parts``
   holds every block's numbers, in rank order.

The cluster barrier (``barrier.cluster.arrive`` and ``wait``) orders memory for the hardware,
but its inline assembly does not order it for the compiler; a ``__syncthreads`` on either side
does, so the stores before it are issued before it and the loads after it come after.
"""

# No ``from __future__ import annotations``: TileLang parses the macros below.
import tilelang.language as T

from jax_camp.tilelang_kernels._rows import ACCUM


def share_buffers(blocks: int, width: int) -> tuple:
    """A block's ``mine`` (width,) and ``parts`` (blocks, width), float32 in shared memory."""
    return T.alloc_shared((width,), ACCUM), T.alloc_shared((blocks, width), ACCUM)


@T.macro
def start_sharing(parts):
    T.fill(parts, 0.0)
    T.sync_threads()  # the zeros are stored before the arrival that publishes them
    T.cluster_arrive()


@T.macro
def share(part, mine, parts):
    blocks, width = parts.shape
    T.cluster_wait()  # every block has started, and zeroed its parts
    # One thread a number and a block: thread t writes number t % width to block t // width.
    t = T.get_thread_binding()
    if t < blocks * width:
        T.copy_cluster(mine[t % width], parts[part, t % width], dst_block=t // width)
    T.sync_threads()
    T.cluster_sync()  # every block's numbers have arrived
    T.sync_threads()
