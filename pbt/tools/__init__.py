"""Command-line tools over a workspace and a trained policy (``python -m pbt.<tool>`` runs ``main``).

- :mod:`~pbt.tools.snapshot`: a read-only view of a workspace (:func:`read_snapshot` ->
  :class:`Snapshot` of :class:`MemberView`), what status and analyze read;
- :mod:`~pbt.tools.status`: the population table (``pbt.status``);
- :mod:`~pbt.tools.analyze`: plots, report and the best member's export (``pbt.analyze``), with
  :mod:`~pbt.tools.schedule` (the schedule behind a checkpoint), :mod:`~pbt.tools.export`,
  :mod:`~pbt.tools.plots` and :mod:`~pbt.tools.report`; :mod:`~pbt.tools.display` formats values;
- :mod:`~pbt.tools.replay` and :mod:`~pbt.tools.play`: train along a schedule, run a checkpoint.

Nothing is re-exported here, so importing one tool never imports the others (nor torch).
"""
