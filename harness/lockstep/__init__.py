"""The kernel lockstep (``harness kernel-diff``): the guest kernel's own ``unwind_deferred`` against
the deferred model, event by event.

:mod:`.driver` stops the guest kernel at its ``unwind_deferred`` points and turns each stop into
an event; :mod:`.compare` (pure) feeds those events to :class:`~harness.deferred.model.DeferredModel`
and compares what the kernel did with what the model does.  A driver of its own, not a scenario:
it samples catalog scenarios' programs, but the kernel's tracer (perf) makes the requests.
"""
