/* tests/unit/unwind/test_load_bias.py: where the loaders put this program (and, built with
 * -DWITH_LIB, a shared library twice: linked, and again in a new namespace by dlmopen), as
 * dl_iterate_phdr() and the functions' own addresses say; then it stops itself (SIGSTOP) for
 * its /proc/PID/maps to be read. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>

static int module(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    printf("module %lx %s\n", (unsigned long)info->dlpi_addr, info->dlpi_name[0] ? info->dlpi_name : "-");
    return 0;
}

__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) int mid(int x) { return leaf(x) + 2; }

#ifdef WITH_LIB
unsigned long lib_where(void);
#endif

int main(int argc, char **argv)
{
    dl_iterate_phdr(module, NULL);
    printf("leaf %lx\n", (unsigned long)&leaf);
#ifdef WITH_LIB
    printf("lib_leaf %lx\n", lib_where());
    void *again = dlmopen(LM_ID_NEWLM, argv[1], RTLD_NOW);
    if (!again) {
        printf("dlmopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    unsigned long (*where)(void) = (unsigned long (*)(void))dlsym(again, "lib_where");
    if (!where) {
        printf("dlsym lib_where: %s\n", dlerror());
        return 1;
    }
    printf("lib_leaf %lx\n", where());
    dl_iterate_phdr(module, NULL);
#endif
    printf("ready %d\n", mid(argc));
    fflush(stdout);
    raise(SIGSTOP);
    return 0;
}
