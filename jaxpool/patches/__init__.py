"""unfold and fold (im2col and col2im): the public functions (``functions``), their checks
and plans (``plan``) and their kernels (``kernel``)."""
