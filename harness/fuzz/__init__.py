"""``harness fuzz``: generated stack shapes built across toolchains, linkers and flags, checked
by the unwinders against each other, each finding shrunk to a minimal reproducer.

* :mod:`.shape` -- program shapes (call graphs with per-function features) and their hypothesis
  strategies;
* :mod:`.render` -- a shape as C or C++ source (jinja2 templates in ``templates/``);
* :mod:`.build` -- the build matrix (toolchain root, -O level, frame pointers, SFrame,
  static/dynamic, linker) and one build;
* :mod:`.finding` -- a finding and its signature;
* :mod:`.static` -- the static checker (no guest);
* :mod:`.campaign` -- budget, seeds, shrinking, reproducer directories, replay and merge.

The live checker (programs sampled in a guest) is ``harness.fuzz.live``; a campaign takes any
checker: a callable from one built program to its findings (:data:`.campaign.Checker`).
"""
