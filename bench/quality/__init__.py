"""Answer-quality benchmarks: seeded task generators (S-NIAH, OOLONG-like aggregation and
pairs, codebase QA over a stdlib package), the plain model, rlmd and the ``rlms``
reference run on the same tasks through one endpoint, scored by :mod:`bench.quality.scoring`.

Entry point: ``python -m bench.quality`` (see :mod:`bench.quality.cli`)."""
