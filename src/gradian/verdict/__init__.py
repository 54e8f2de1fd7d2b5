"""The verdict: from the harm the attribution measured, diagnose's findings and the regression call, what the report
says and which rows to drop.

- :mod:`gradian.verdict.evidence`: what the verdict reads, typed and built once (:class:`Evidence`).
- :mod:`gradian.verdict.steps`: the decision as an ordered list of named steps (``decide``), each refining one
  :class:`gradian.verdict.decision.Decision`; the culprit tests in :mod:`~gradian.verdict.culprits`,
  :mod:`~gradian.verdict.groups` and :mod:`~gradian.verdict.stats`.
- :mod:`gradian.verdict.words`: the decision written as sentences (``write``); it decides nothing.
- :mod:`gradian.verdict.schema`: report.json's ``verdict`` (:class:`Verdict`).
- :mod:`gradian.verdict.make`: ``make_verdict``, all of it in one call from report.json's shapes.

The thresholds are :class:`gradian.options.VerdictOptions`.
"""
