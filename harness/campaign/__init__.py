"""Campaigns as tasks on Dask distributed: the one room of the harness that knows about Dask.

* :mod:`.executor` -- :class:`~.executor.Executor`: an embedded ``LocalCluster`` sized for the
  machine, or an existing cluster (``--scheduler ADDRESS``); plain task specs in, plain results
  out, bounded retries (a task whose worker died runs again elsewhere, counted once), a progress
  line, the scheduler's loss and Ctrl-C as typed ends;
* :mod:`.isolate` -- a task's work in a child process of the worker, killed (with the guest it
  started) when the campaign is cancelled.

The drivers (:mod:`harness.fuzz.spread`, :mod:`harness.matrix`, ``harness sframe check
--tree``) cut their work into tasks and merge what comes back; nothing below them imports Dask.
"""
