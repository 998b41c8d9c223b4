"""``harness fuzz``: generated programs of many stack shapes, built across toolchains, and their
stacks checked statically and live (issue #25)."""
