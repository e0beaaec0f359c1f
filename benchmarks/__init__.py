"""The benchmark: jaxpool against torch, flax, keras and equinox, side by side.

Run ``python -m benchmarks --help`` from the repository root (``pip install -e ".[bench]"``
installs the peers; the tool skips those that are not installed). It is not part of the
installed package.

- the runner: :mod:`~benchmarks.cli` (the command line), :mod:`~benchmarks.runner` (the
  modes, the checks against torch, the timing loop), :mod:`~benchmarks.sides` (the
  implementations set side by side), :mod:`~benchmarks.report` (tables, chart, JSON),
  :mod:`~benchmarks.machine` (the machine in words), :mod:`~benchmarks.derivatives` (cells
  timed in their forward, gradient and second derivative);
- :mod:`benchmarks.cells`: the cells, one module per jaxpool family, and the cell sets
  across families;
- :mod:`benchmarks.programs`: whole programs (models, the GPU checks, the parity floor, and
  the tables that span two families).
"""
