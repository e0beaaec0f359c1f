"""The jaxpool suite: every jaxpool op (pooling, interpolation, unpooling, padding, pixel
shuffle) against torch.nn.functional, run by ``python -m parity``.

``ops`` says what each op is on both sides, ``grid`` which cases run, ``runner`` how they
run (worker processes, the stored programs and the compilation cache), ``report`` how the results are shown,
``cli`` the command line. The generic checker (``parity.compare``) knows nothing of this
package.
"""
