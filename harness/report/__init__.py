"""Renderers of scenario results and run directories: text tables (:mod:`.text`), the reading of a
run directory (:mod:`.run`), the HTML page (:mod:`.html`) with its templates under ``templates/``."""
