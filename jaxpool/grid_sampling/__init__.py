"""grid_sample and affine_grid: the public functions (``functions``), their checks and
plans (``plan``) and the kernel that reads at the grid's positions (``kernel``)."""
