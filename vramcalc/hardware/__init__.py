"""The GPU catalog, a card by name, size or `local`, memory-bus bandwidth and weight streaming.

Internal: no stability promise between releases; the public surface is ``vramcalc`` (its ``__all__``, with
:mod:`vramcalc.api`), the models of :mod:`vramcalc.results` and the command line.
"""
