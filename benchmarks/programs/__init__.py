"""The benchmark's whole programs, each run as ``python -m benchmarks.programs.NAME``:

- :mod:`~benchmarks.programs.models`: whole training steps of small real-shaped models
  (:mod:`~benchmarks.programs.model_zoo`) with jaxpool's layers, a JAX peer's and torch's;
- :mod:`~benchmarks.programs.gpu_check`: the GPU checks (determinism, torch CUDA, torchax,
  the benchmark and the sharded ops on a GPU), one command;
- :mod:`~benchmarks.programs.parity_floor`: what a first run of ``python -m parity`` costs,
  and how much of it no op can remove;
- :mod:`~benchmarks.programs.unpool_pad`: the table of the unpooling and padding cells;
- :mod:`~benchmarks.programs.patches_roi`: the table of the patches and roi_align cells.
"""
