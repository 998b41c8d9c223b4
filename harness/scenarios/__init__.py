"""Scenarios: the catalog (:mod:`.catalog`), the request/delivery loop on a live guest
(:mod:`.engine`) and what a run found (:mod:`.result`)."""

from .catalog import CATALOG, DEFAULT_SET, Scenario, programs_for, user_scenario

__all__ = ["CATALOG", "DEFAULT_SET", "Scenario", "programs_for", "user_scenario"]
