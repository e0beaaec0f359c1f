"""The jaxpool pooling suite: every jaxpool op against torch.nn.functional, run by
``python -m parity``.

``ops`` says what each op is on both sides, ``grid`` which cases run, ``report`` how the
results are shown, ``cli`` the command line. The generic checker (``parity.compare``)
knows nothing of this package.
"""
