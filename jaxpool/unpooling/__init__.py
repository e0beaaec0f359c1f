"""max_unpool1d/2d/3d: the public functions (``functions``), the plan of where each element
goes (``plan``) and the kernel that puts it there (``kernel``)."""
