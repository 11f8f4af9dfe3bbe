"""``python -m conformance``: see :mod:`conformance.cli`."""

import sys

from .cli import entry

sys.exit(entry())
