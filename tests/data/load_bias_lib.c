/* The shared library of load_bias.c (tests/unit/unwind/test_load_bias.py): a function with a
 * frame of its own and data (a PT_LOAD RW segment, RELRO beside it).  lib_where() says where
 * this instance's lib_leaf is: &lib_leaf in a non-PIE program is the program's PLT entry (the
 * canonical address), a hidden function's address is the library's own. */
int lib_data[64] = {1};
int (*const lib_table[2])(int) = {0};

__attribute__((noinline, visibility("hidden"))) int lib_leaf(int x)
{
    return lib_data[x & 63] + x * 5 + (lib_table[x & 1] != 0);
}

unsigned long lib_where(void)
{
    return (unsigned long)&lib_leaf;
}
