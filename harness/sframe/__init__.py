"""SFrame (.sframe, PT_GNU_SFRAME) V1, V2 and V3 as pure functions of bytes.

* :mod:`.format` -- the binary layouts, each beside the specification section it implements;
* :mod:`.parse` -- :class:`SFrameSection`: decoding, FDE/FRE lookup, :class:`FrameRule` per PC;
* :mod:`.elf` -- :class:`SFrameTable`: the section of an ELF file (section header or
  PT_GNU_SFRAME) or of bytes read from guest memory;
* :mod:`.reloc` -- relocatable objects: ``.rela.sframe`` applied, sections placed;
* :mod:`.ar` -- the members of an ``ar`` archive.

The checker of a section (linked outputs, objects, archives) against its DWARF CFI is
:mod:`harness.unwind.sframe_check` (it reads both), the checker over a whole directory tree
:mod:`harness.unwind.sframe_tree`, its lookup benchmark :mod:`harness.bench.sframe`.

Nothing here starts processes or opens sockets.
"""

from .elf import SFrameTable
from .errors import SFrameError
from .parse import Location, SFrameFDE, SFrameFRE, SFrameHeader, SFrameMatch, SFrameSection

__all__ = ["Location", "SFrameError", "SFrameFDE", "SFrameFRE", "SFrameHeader", "SFrameMatch", "SFrameSection",
           "SFrameTable"]
