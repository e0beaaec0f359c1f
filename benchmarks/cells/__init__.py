"""The benchmark's cells, one module per jaxpool family (named as its folder in jaxpool),
and the cell sets that cut across families.

- :mod:`~benchmarks.cells.pooling`: the pooling grid that ``python -m benchmarks`` times
  on every side, and the 3d max-pooling cell (``python -m benchmarks.cells.pooling``);
- :mod:`~benchmarks.cells.unpooling`, :mod:`~benchmarks.cells.padding`: max_unpool2d and
  pad, timed in one table by ``python -m benchmarks.programs.unpool_pad``;
- :mod:`~benchmarks.cells.resampling`: interpolate and pixel_shuffle, and interpolate's
  compile times (``python -m benchmarks.cells.resampling``);
- :mod:`~benchmarks.cells.grid_sampling`: grid_sample
  (``python -m benchmarks.cells.grid_sampling``);
- :mod:`~benchmarks.cells.patches`, :mod:`~benchmarks.cells.roi`: unfold, fold and
  roi_align, timed in one table by ``python -m benchmarks.programs.patches_roi``;
- :mod:`~benchmarks.cells.fractional`: fractional_max_pool2d/3d
  (``python -m benchmarks.cells.fractional``);
- :mod:`~benchmarks.cells.deformable`: multi_scale_deformable_attention
  (``python -m benchmarks.cells.deformable``), and the same family's deform_conv2d in
  :mod:`~benchmarks.cells.deform_conv` (``python -m benchmarks.cells.deform_conv``);
- across families: :mod:`~benchmarks.cells.eager` (eager calls against jitted ones and
  torch), :mod:`~benchmarks.cells.compile_times` (compile time against the extents and the
  ratio), :mod:`~benchmarks.cells.equinox_modules` (jaxpool.equinox's modules against
  eqx.nn's); each ``python -m benchmarks.cells.NAME``.

A module whose cells have a table of their own runs it as ``python -m
benchmarks.cells.NAME``; the others give their cells to a program of
:mod:`benchmarks.programs`.
"""
