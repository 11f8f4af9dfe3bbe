"""NVFP4 conformance runner: fuzzes implementations against the oracle (``python -m conformance run``).

Modules (one concept each):

* :mod:`conformance.cases` -- the :class:`Case` record and its ``.npz`` serialization;
* :mod:`conformance.generators` -- seeded case generators (shapes, splits, values, options);
* :mod:`conformance.ops` -- the op registry: reference outputs (the oracle) and comparison mode per op;
* :mod:`conformance.independent` -- implementations we did not write (ml_dtypes, torch, torchao, fractions)
  and layout code written independently of the oracle;
* :mod:`conformance.te_reference` -- TransformerEngine's own reference quantizer, loaded from a TE source checkout;
* :mod:`conformance.backends` -- the :class:`Backend` interface, the CPU backends and the CUDA device backend;
* :mod:`conformance.compare` -- byte-for-byte / bounded comparison and mismatch location;
* :mod:`conformance.shrink` -- failure minimization;
* :mod:`conformance.report` -- statistics, progress line, summary table and JSON report;
* :mod:`conformance.runner` -- scheduling, budgets, shards and worker processes;
* :mod:`conformance.cli` -- the command line.
"""

from .backends import Backend, register_backend
from .cases import Case, load_case, save_case
from .runner import RunConfig, run

__all__ = ["Backend", "Case", "RunConfig", "load_case", "register_backend", "run", "save_case"]
