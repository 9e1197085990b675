"""The stacks wing: one module per library, runtime or method family. Each turns the spec's keys for its
library into what the formulas read: facts and policies on the resolved :class:`~vramcalc.core.stack.Stack`,
the model's code facts on its shape (:class:`~vramcalc.core.code.ModelCode`), a quantization method's
storage layout (:class:`~vramcalc.llm.quantization.QuantLayout`), and the phases or terms only it adds.
:mod:`vramcalc.stacks.registry` is where the built-in ones are found.

Internal: no stability promise between releases; the public surface is ``vramcalc`` (its ``__all__``, with
:mod:`vramcalc.api`), the models of :mod:`vramcalc.results` and the command line.
"""
