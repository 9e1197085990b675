"""LLM formulas: the KV cache and serving capacity, generation, quantized weights, adapters and mixtures of experts.

Internal: no stability promise between releases; the public surface is ``vramcalc`` (its ``__all__``, with
:mod:`vramcalc.api`), the models of :mod:`vramcalc.results` and the command line.
"""
