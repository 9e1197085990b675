"""Model sources: a model by the name the user has (a path, a catalog name, the local Hugging Face cache,
a Hub id), read from its files' headers.

Internal: no stability promise between releases; the public surface is ``vramcalc`` (its ``__all__``, with
:mod:`vramcalc.api`), the models of :mod:`vramcalc.results` and the command line.
"""
