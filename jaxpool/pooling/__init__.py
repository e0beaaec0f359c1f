"""Average, max, LP, adaptive and global pooling: the public functions (``functions``),
their checks and plans in plain Python (``plan``, and the per-axis window arithmetic in
``windows``), and their JAX kernels (``kernel``: window sums; ``kernel_max``: the max and
its pick)."""
