"""pad in every mode: the public function (``functions``), torch's checks and the widths
(``plan``) and the kernel (``kernel``)."""
