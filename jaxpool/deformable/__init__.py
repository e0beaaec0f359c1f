"""Multi-scale deformable attention (Deformable DETR, RT-DETR): the public function
(``functions``), the checks and static layout of a call (``plan``) and the kernel that reads
every level's corners in one gather and adds the derivatives back by one sorted sum
(``kernel``)."""
