"""Halo arithmetic for spatially sharded inputs, in plain Python (no JAX, no tracing).

An axis of extent ``n`` sharded over ``shards`` devices gives each device ``block = n /
shards`` consecutive rows; an op whose output extent ``k`` also divides gives each device
``k / shards`` consecutive outputs. Output ``i`` reads the input rows ``reads[i] = [lo,
hi)``. Each device then needs the rows its outputs read: its own block, up to ``left``
rows of the previous device's block and up to ``right`` rows of the next one's (its
halo), which one exchange with each neighbour brings (:mod:`jaxpool.halo.kernel`).

Around the exchanged block ``[s*block - left, (s+1)*block + right)`` of device ``s``, the
rows outside ``[0, n)`` do not exist (except on circular axes, where they wrap); the
device runs the unsharded op on the rows that exist, with a plan whose windows, taps or
copies are the global plan's, shifted into the block. Devices whose plans are equal share
one program; the others take a branch of their own.

Everything here is static: per device, which rows to keep and the plan that computes its
outputs from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxpool.resampling.plan import AxisSampling
from jaxpool.pooling.windows import AxisPlan, is_whole_axis


@dataclass(frozen=True)
class AxisHalo:
    """One sharded axis: ``shards`` devices of ``block`` input rows and ``out_block``
    outputs each; each device receives ``left`` rows from the previous device and ``right``
    from the next (wrapping around when ``circular``)."""

    in_size: int
    out_size: int
    shards: int
    left: int
    right: int
    circular: bool = False

    @property
    def block(self) -> int:
        return self.in_size // self.shards

    @property
    def out_block(self) -> int:
        return self.out_size // self.shards

    def kept(self, shard: int) -> tuple[int, int]:
        """``(lo, hi)``: the rows of device ``shard``'s exchanged block (of ``left + block
        + right`` rows) that exist in the input; on a circular axis, all of them."""
        if self.circular:
            return 0, self.left + self.block + self.right
        first = shard * self.block - self.left
        lo = max(0, -first)
        hi = min(self.in_size, (shard + 1) * self.block + self.right) - first
        return lo, hi

    def origin(self, shard: int) -> int:
        """The input row (global, unwrapped) that is row 0 of the kept rows of ``shard``."""
        return shard * self.block - self.left + self.kept(shard)[0]


def plan_axis_halo(name: str, reads, in_size: int, shards: int, *, circular: bool = False,
                   what: str = "output") -> AxisHalo:
    """The halo of one sharded axis from what each output reads (``reads[i] = (lo, hi)``,
    input rows, an empty range for an output that reads none; on a circular axis rows may
    lie outside ``[0, in_size)`` and wrap). Raises ValueError, naming ``name`` (the mesh
    axis), where per-device outputs cannot hold: an extent that does not divide over the
    devices, or a halo wider than a device's block."""
    out_size = len(reads)
    if in_size % shards:
        raise ValueError(f"axis_names: the input extent {in_size} along the axis sharded over "
                         f"{name!r} does not divide over its {shards} devices")
    if out_size % shards:
        raise ValueError(f"axis_names: the {what} extent {out_size} along the axis sharded "
                         f"over {name!r} does not divide over its {shards} devices (each "
                         f"device computes an equal block of outputs; shard an axis whose "
                         f"output extent divides, or gather the axis first)")
    block, out_block = in_size // shards, out_size // shards
    left = right = 0
    for shard in range(shards):
        own = range(shard * out_block, (shard + 1) * out_block)
        spans = [reads[i] for i in own if reads[i][1] > reads[i][0]]
        if not spans:
            continue
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
        if not circular:
            lo, hi = max(lo, 0), min(hi, in_size)
        left = max(left, shard * block - lo)
        right = max(right, hi - (shard + 1) * block)
    if left > block or right > block:
        raise ValueError(f"axis_names: along the axis sharded over {name!r}, a device's "
                         f"outputs read {max(left, right)} rows of its neighbour, more than "
                         f"the {block} rows each device holds (the halo must come from the "
                         f"next device only): use fewer devices on this axis")
    return AxisHalo(in_size, out_size, shards, left, right, circular)


# --- pooling windows -----------------------------------------------------------------------

def window_reads(plan: AxisPlan) -> list[tuple[int, int]]:
    """Input rows each pooling window reads (padding excluded)."""
    return [(plan.real_rows(i).start, plan.real_rows(i).stop) for i in range(plan.out_size)]


def pool_halo(name: str, plan: AxisPlan, shards: int) -> AxisHalo:
    return plan_axis_halo(name, window_reads(plan), plan.in_size, shards)


def local_pool_axis(plan: AxisPlan, halo: AxisHalo, shard: int) -> AxisPlan:
    """Device ``shard``'s windows over its kept rows: the global windows it owns, shifted;
    rows outside the input become padding (zeros for a sum, never picked by a max)."""
    lo, hi = halo.kept(shard)
    origin = halo.origin(shard)
    own = range(shard * halo.out_block, (shard + 1) * halo.out_block)
    starts = [plan.starts[i] - plan.pad_lo - origin for i in own]   # kept-row coordinates
    pad_lo = max(0, -min(starts))
    return AxisPlan(hi - lo, halo.out_block, pad_lo,
                    tuple(a + pad_lo for a in starts),
                    tuple(plan.stops[i] - plan.pad_lo - origin + pad_lo for i in own),
                    tuple(plan.divisors[i] for i in own), plan.dilation)


def whole_axis_block(plan: AxisPlan, shards: int) -> AxisPlan:
    """One window over a device's block of an axis pooled whole (global, adaptive to 1):
    each device reduces its block, then one reduction across devices; the divisor is the
    whole axis's."""
    block = plan.in_size // shards
    return AxisPlan(block, 1, 0, (0,), (block,), (plan.in_size,))


def reduces_whole_axis(plan: AxisPlan) -> bool:
    return is_whole_axis(plan)


# --- resampling taps -----------------------------------------------------------------------

def sampling_reads(plan: AxisSampling) -> list[tuple[int, int]]:
    return [(min(taps), max(taps) + 1) if taps else (0, 0) for taps in plan.taps]


def sampling_halo(name: str, plan: AxisSampling, shards: int) -> AxisHalo:
    return plan_axis_halo(name, sampling_reads(plan), plan.in_size, shards)


def local_sampling(plan: AxisSampling, halo: AxisHalo, shard: int) -> AxisSampling:
    """Device ``shard``'s outputs, their taps shifted to its kept rows."""
    lo, hi = halo.kept(shard)
    origin = halo.origin(shard)
    own = range(shard * halo.out_block, (shard + 1) * halo.out_block)
    return AxisSampling(hi - lo, halo.out_block,
                        tuple(tuple(t - origin for t in plan.taps[i]) for i in own),
                        tuple(plan.weights[i] for i in own), copies=plan.copies,
                        sums=plan.sums, backend=plan.backend)


# --- pad: every output row a copy of an input row, or the constant -------------------------

def pad_rows(mode: str, n: int, lo: int, hi: int) -> list[int | None]:
    """For each output row of ``pad`` along one axis, the input row it copies (None: the
    constant), torch's rules (negative widths crop first). On a circular axis the rows are
    unwrapped: ``-1`` is the last row, ``n`` the first, read across the axis's ends."""
    crop_lo, crop_hi = max(-lo, 0), max(-hi, 0)
    rows = list(range(crop_lo, n - crop_hi))
    lo, hi = max(lo, 0), max(hi, 0)
    m = len(rows)
    out: list[int | None] = []
    for j in range(-lo, m + hi):
        if 0 <= j < m:
            out.append(rows[j])
        elif mode == "constant":
            out.append(None)
        elif mode == "reflect":
            out.append(rows[-j if j < 0 else 2 * (m - 1) - j])
        elif mode == "replicate":
            out.append(rows[0] if j < 0 else rows[-1])
        else:  # circular, never cropped here (see pad_halo)
            out.append(j)
    return out


def pad_halo(name: str, rows: list[int | None], n: int, shards: int,
             circular: bool) -> AxisHalo:
    reads = [(0, 0) if r is None else (r, r + 1) for r in rows]
    return plan_axis_halo(name, reads, n, shards, circular=circular)


def local_pad_rows(rows: list[int | None], halo: AxisHalo, shard: int
                   ) -> tuple[int | None, ...]:
    """Device ``shard``'s output rows as rows of its kept rows (None: the constant)."""
    origin = halo.origin(shard)
    own = rows[shard * halo.out_block:(shard + 1) * halo.out_block]
    return tuple(None if r is None else r - origin for r in own)


def runs(rows: tuple[int | None, ...]) -> list[tuple[int | None, int, int]]:
    """``rows`` as runs ``(first, step, count)`` of rows one apart (step 1 or -1), or of
    the constant (first None), for slices and reversals."""
    out: list[list] = []
    for r in rows:
        if out:
            first, step, count = out[-1]
            if r is None and first is None:
                out[-1][2] += 1
                continue
            if r is not None and first is not None:
                nxt = first + step * count
                if count == 1 and abs(r - first) == 1:
                    out[-1] = [first, r - first, 2]
                    continue
                if r == nxt:
                    out[-1][2] += 1
                    continue
        out.append([r, 1, 1])
    return [tuple(run) for run in out]


# --- max_unpool: pooled rows spread into the unpooled extent -------------------------------

def unpool_halo(name: str, plan: AxisPlan, shards: int) -> AxisHalo:
    """``plan``: the matching max pool's windows (``in_size`` unpooled, ``out_size``
    pooled). Each unpooled row reads the pooled values of the windows that hold it; the
    pooled axis is sharded, the unpooled output is split the same way."""
    holding = plan.windows_of_rows()
    reads = [(min(h), max(h) + 1) if h else (0, 0) for h in holding]
    return plan_axis_halo(name, reads, plan.out_size, shards, what="unpooled")


def local_unpool_axis(plan: AxisPlan, halo: AxisHalo, shard: int) -> AxisPlan:
    """Device ``shard``'s windows: its kept pooled rows' windows, over its own block of
    unpooled rows (taps outside it are padding, never written)."""
    lo, hi = halo.kept(shard)
    origin = halo.origin(shard)
    first_row = shard * halo.out_block           # unpooled rows of this device
    windows = range(origin, origin + hi - lo)
    starts = [plan.starts[q] - plan.pad_lo - first_row for q in windows]
    pad_lo = max(0, -min(starts))
    kernel = plan.stops[0] - plan.starts[0]
    real = tuple(sum(0 <= a + t < halo.out_block for t in range(kernel)) for a in starts)
    return AxisPlan(halo.out_block, hi - lo, pad_lo, tuple(a + pad_lo for a in starts),
                    tuple(a + pad_lo + kernel for a in starts), real)
