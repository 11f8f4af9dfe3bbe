"""``python -m conformance``: see :mod:`conformance.cli`."""

import sys

from .cli import main

sys.exit(main())
