"""Tools for tests and developers that drive outside programs (gdb): not used by the harness at run time."""
