"""Which strategy was measured fastest on each backend, per op kind and axis situation.

The one table that :func:`jaxpool.pooling.windows.choose_strategy`,
:func:`jaxpool.pooling.windows.choose_tangent` and :func:`jaxpool.resampling.plan.choose_sampling_strategy`
read. ``RULES`` means the decision rules written in those functions, XLA:CPU's (their
docstrings cite the benchmark cells; BENCHMARKS.md holds the numbers); any other entry
names the strategy that backend takes instead. Every strategy is exact on every backend
(the tests run each of them on the CPU, whatever the table says); the table only decides
speed.

The backend a program is traced for is not visible while it is traced, so an op reads
:func:`current_backend`: the one forced by :func:`use_backend`, else
``jax.default_backend()`` (where an outer ``jax.jit`` lowers unless told otherwise). Plans
carry it, so a program traced for one backend's table is never reused for another's.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import jax

BACKENDS = ("cpu", "gpu", "tpu")
RULES = "rules"

# Not measured yet: this backend takes that one's table.
FALLBACK = {"tpu": "gpu"}

# (op kind, axis situation) -> {backend: strategy or RULES}.
TABLE: dict[tuple[str, str], dict[str, str]] = {
    # Window sums (average, adaptive average and LP pooling, area interpolation): the
    # values along an axis of equal windows at a fixed stride. GPU: one
    # ``lax.reduce_window`` per axis, whose forward beats the CPU rules' there
    # (BENCHMARKS.md, "GPU", the reduce_window column of cells `adaptive 32x64x56x56 -> 7`,
    # `avg 32x64x32x32 k3 s1 p1` and `avg 16x64x56x56 k3 s2 p1 ceil`). On XLA:CPU
    # reduce_window is the slow one (choose_tangent).
    ("window sums", "equal windows"): {"cpu": RULES, "gpu": "reduce_window"},
    # Their derivatives where the windows overlap at stride 1: reduce_window's transpose,
    # a pad and another reduce_window, faster there than the CPU rules (same run, cell
    # `avg 32x64x32x32 k3 s1 p1`).
    ("window sums derivative", "equal windows at stride 1"): {"cpu": RULES,
                                                              "gpu": "reduce_window"},
    # Other equal windows keep the CPU's derivative rules on the GPU, faster there than
    # reduce_window's transpose (same run, cells `adaptive 32x64x56x56 -> 7` and
    # `avg 16x64x56x56 k3 s2 p1 ceil`).
    ("window sums derivative", "other windows"): {"cpu": RULES, "gpu": RULES},
    # Max pooling: no other strategy was measured on a GPU.
    ("max pooling", "any axis"): {"cpu": RULES, "gpu": RULES},
    # Resampling: the GPU run's "jaxpool-phases" side forced phases only where the rules
    # already took them (DeepLab x8, bilinear x2, 24 -> 192, trilinear x2, bicubic
    # 14 -> 21) or where the code it ran had no phases (align_corners x2, bicubic
    # 224 -> 299, both antialias cells): it ran the default's own programs, so its spread
    # is the run's noise, not a faster strategy. The matrix product, the one real
    # alternative timed, was slower on most forwards (BENCHMARKS.md, "Resampling,
    # unpooling and padding on the GPU", cell `DeepLab bilinear x8, 2x21x64x64`).
    ("resampling", "any axis"): {"cpu": RULES, "gpu": RULES},
    # grid_sample's derivatives: how the rows read are added back ("sorted": a stable sort
    # and a segmented scan, no scatter; "scatter": a scatter-add, which XLA:CPU runs in one
    # thread in the rows' order, so deterministic there; never on a GPU or TPU, whose
    # scatter-add has no fixed order).
    ("grid sampling", "reads added back"): {"cpu": "scatter", "gpu": "sorted"},
    # multi_scale_deformable_attention's derivatives: the same choice for its one read of
    # every level's corners (BENCHMARKS.md, "Multi-scale deformable attention (CPU)", the
    # jaxpool-sorted side of cells `detr-encoder`, `detr-decoder` and `rtdetr-decoder`).
    ("deformable attention", "reads added back"): {"cpu": "scatter", "gpu": "sorted"},
    # fractional_max_pool2d/3d's derivatives: the same choice for its rows read per axis
    # (BENCHMARKS.md, "Fractional max pooling", the sorted and scatter sides of cells
    # `fractional2d` and `fractional3d`).
    ("fractional max pooling", "reads added back"): {"cpu": "scatter", "gpu": "sorted"},
}

_forced: contextvars.ContextVar[str | None] = contextvars.ContextVar("jaxpool_backend",
                                                                     default=None)


def check_backend(backend) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, "
                         f"got {backend!r}")
    return backend


def lookup(kind: str, situation: str, backend: str) -> str:
    """``TABLE``'s entry for the op kind and axis situation on ``backend`` (or on the
    backend it falls back to)."""
    row = TABLE[(kind, situation)]
    while backend not in row:
        backend = FALLBACK.get(backend, "cpu")
    return row[backend]


def current_backend() -> str:
    """The backend whose table the next plan reads: :func:`use_backend`'s, else
    ``jax.default_backend()`` (a platform this table does not know reads the CPU's)."""
    forced = _forced.get()
    if forced is not None:
        return forced
    platform = jax.default_backend()
    return platform if platform in BACKENDS else "cpu"


@contextlib.contextmanager
def use_backend(backend: str) -> Iterator[None]:
    """Plans made within read ``backend``'s table, whatever the device: to run another
    backend's strategies on this one (tests, comparisons).

    The table is read when a program is traced: a ``jax.jit`` function already traced
    outside keeps its program (``jax.clear_caches()`` or a new function retraces it).

    Example:
      >>> with jaxpool.strategy_table.use_backend("gpu"):
      ...     y = jaxpool.avg_pool2d(jnp.ones((2, 3, 8, 8)), 3, 2, 1)
      >>> y.shape
      (2, 3, 4, 4)
    """
    token = _forced.set(check_backend(backend))
    try:
        yield
    finally:
        _forced.reset(token)
