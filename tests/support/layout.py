"""Maps text of an ELF file mapped the way the loaders map it, for tests that need an address
space without a process (tests/unit/unwind/test_load_bias.py checks the rule on real runs)."""

from __future__ import annotations

from harness.unwind.maps import load_image, page_down, page_up


def loader_maps(path, base: int, name: str | None = None, perms: str = "r-xp") -> str:
    """The maps lines of the ELF file ``path`` (named ``name`` in them, ``path`` by default) with
    its first PT_LOAD's page at ``base`` (an ET_EXEC's where it was linked, whatever ``base``):
    each PT_LOAD's pages, from its offset's page."""
    img = load_image(path)
    loads = img.loads
    bias = base - page_down(loads[0].vaddr) if img.is_pie_or_shared else 0
    return "\n".join(f"{bias + page_down(s.vaddr):x}-{bias + page_up(s.vaddr + s.memsz):x} {perms} "
                     f"{page_down(s.offset):08x} 08:01 1 {name or path}" for s in loads)


def shares_file_pages(loads) -> bool:
    """Whether two PT_LOADs (in address order) have a file page in common: the next one starts in
    the page where the last one ends (mold's and lld's layout; ld.bfd's -z separate-code and
    gold's keep them apart)."""
    return any(page_down(b.offset) <= page_down(a.offset + max(a.filesz, 1) - 1)
               for a, b in zip(loads, loads[1:], strict=False) if a.filesz and b.filesz)
