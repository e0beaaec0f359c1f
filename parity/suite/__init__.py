"""The jaxpool suite: every jaxpool op (pooling, interpolation, unpooling, padding, pixel
shuffle, grid sampling, patches, fractional pooling, roi_align) against its torch twin, run
by ``python -m parity``.

``ops`` says what each op is on both sides, ``cases`` which cases run (one file per op
family, in ``cases/``), ``runner`` how they run (worker processes, the stored programs and
the compilation cache), ``report`` how the results are shown, ``cli`` the command line.
The generic checker (``parity.compare``) knows nothing of this package.
"""
