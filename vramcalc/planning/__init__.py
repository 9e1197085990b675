"""What to do about an estimate: the one fit verdict, the largest batch or sequence, suggestions, sweeps, plans
and the CI gate.

Internal: no stability promise between releases; the public surface is ``vramcalc`` (its ``__all__``, with
:mod:`vramcalc.api`), the models of :mod:`vramcalc.results` and the command line.
"""
