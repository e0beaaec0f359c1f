"""roi_align: the public function (``functions``), torchvision's checks and the sampling
grid (``plan``) and the kernel (``kernel``)."""
