"""fractional_max_pool2d/3d: the public functions (``functions``), torch's windows from its
samples (``plan``) and the kernel that reads and picks them (``kernel``)."""
