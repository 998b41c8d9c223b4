"""The soak (``harness bench soak``): many requests, NMI and timer, over tasks that fork, exec and
exit, with cancels.  :mod:`.engine` drives the scenario engine with the soak's points and cancels;
:mod:`.ledger` (pure) accounts for every request in memory bounded by the live tasks."""
