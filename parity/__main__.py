"""``python -m parity``: every jaxpool op against torch (see ``parity.pooling.cli``)."""

import sys

from .pooling.cli import main

if __name__ == "__main__":
    sys.exit(main())
