"""The benchmark: jaxpool against torch, flax, keras and equinox, side by side.

Run ``python -m benchmarks --help`` from the repository root (``pip install -e ".[bench]"``
installs the peers; the tool skips those that are not installed). It is not part of the
installed package.
"""
