"""``python -m parity``: every jaxpool op against torch (see ``parity.suite.cli``)."""

import sys

from .suite.cli import main

if __name__ == "__main__":
    sys.exit(main())
