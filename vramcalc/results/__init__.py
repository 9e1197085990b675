"""The JSON documents of the CLI as pydantic models: the ``--json`` contract written down as types.

* :mod:`vramcalc.results.estimate`: ``vramcalc estimate --json`` (:class:`~vramcalc.results.estimate.EstimateResult`)
* :mod:`vramcalc.results.check`: one row of ``vramcalc check --format json``
  (:class:`~vramcalc.results.check.CheckResult`, :class:`~vramcalc.results.check.CheckErrorResult`,
  :class:`~vramcalc.results.check.CheckSkippedResult`)
* :mod:`vramcalc.results.limits`: ``vramcalc max-batch --json`` and ``max-seq --json``
  (:class:`~vramcalc.results.limits.LimitResult`)
* :mod:`vramcalc.results.bandwidth`: ``vramcalc bandwidth --json``
  (:class:`~vramcalc.results.bandwidth.BandwidthResult`)
* :mod:`vramcalc.results.planning`: ``vramcalc fit --json``, ``sweep --json`` and ``plan --json``
  (:class:`~vramcalc.results.planning.FitResult`, :class:`~vramcalc.results.planning.SweepResult`,
  :class:`~vramcalc.results.planning.PlanResult`)
* :mod:`vramcalc.results.catalog`: the entries of ``vramcalc models --json``
  (:class:`~vramcalc.results.catalog.ModelResult`)
* :mod:`vramcalc.results.imported`: the spec ``vramcalc import`` writes
  (:class:`~vramcalc.results.imported.ImportResult`)

Every model has a ``of(...)`` constructor from the core objects and :meth:`~vramcalc.results.base.Result.to_dict`,
the document the CLI prints: keys that do not apply to an estimate are absent, keys that apply with no value
are null. Sizes are int bytes, rates bytes per second, times seconds. Nothing here imports typer or rich, and
this package is imported only by ``--json`` output and the Python API.
"""
