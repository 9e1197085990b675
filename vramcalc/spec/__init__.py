"""What a spec file says, as pydantic models; reading it with one error line per problem; the model catalog
and importers.

Internal: no stability promise between releases; the public surface is ``vramcalc`` (its ``__all__``, with
:mod:`vramcalc.api`), the models of :mod:`vramcalc.results` and the command line.
"""
