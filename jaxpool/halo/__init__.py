"""Spatially sharded inputs: each device's rows and halo in plain Python (``plan``), the
exchanges and per-device programs in JAX (``kernel``), the partitioned primitive under plain
``jit`` (``jit``; ``jaxpool.halo_jit`` is the same module), and the report of every op's
collectives (``python -m jaxpool.halo.check``)."""
