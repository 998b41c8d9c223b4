/* A program that says where it is and stops itself (tests/unit/toolchain/test_witness.py): its
 * load bias as ld.so records it (dl_iterate_phdr's dlpi_addr of the main program), the run-time
 * addresses of two functions, then SIGSTOP, so that a test reads its /proc/PID/maps as the
 * kernel's ELF loader and ld.so laid it out. */
#define _GNU_SOURCE
#include <link.h>
#include <signal.h>
#include <stdio.h>

static int first(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(unsigned long *)data = info->dlpi_addr;
    return 1; /* the main program comes first */
}

__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }

__attribute__((noinline)) int middle(int x)
{
    return leaf(x) + leaf(x + 1);
}

int main(void)
{
    unsigned long bias = 0;
    dl_iterate_phdr(first, &bias);
    printf("bias %lx\nmiddle %lx\nleaf %lx\nend 0\n", bias, (unsigned long)middle, (unsigned long)leaf);
    fflush(stdout);
    raise(SIGSTOP);
    return middle(2) == 0;
}
