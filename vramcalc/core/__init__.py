"""The first-order memory model: parameters, gradients, optimizer states, activations, inputs and phases,
as plain formulas.

Internal: no stability promise between releases; the public surface is ``vramcalc`` (its ``__all__``, with
:mod:`vramcalc.api`), the models of :mod:`vramcalc.results` and the command line.
"""
