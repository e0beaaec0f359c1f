"""interpolate in every mode, upsample, pixel and channel shuffle: the public functions
(``functions``), each axis's taps and weights and the strategy per axis (``plan``), and
their JAX kernels (``kernel``)."""
