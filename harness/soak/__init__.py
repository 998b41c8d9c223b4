"""The soak (``harness bench soak``): many requests, NMI and timer, over tasks that fork, exec and
exit, with cancels; every request accounted for in bounded memory.  :mod:`.engine` drives the
scenario engine with the soak's points and cancels; its ledger checks every callback."""
