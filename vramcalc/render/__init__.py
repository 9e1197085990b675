"""The only place bytes become text: tables, verdicts, the HTML report and escaping of user text per output format.

Internal: no stability promise between releases; the public surface is ``vramcalc`` (its ``__all__``, with
:mod:`vramcalc.api`), the models of :mod:`vramcalc.results` and the command line.
"""
