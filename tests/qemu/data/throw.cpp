// Throws through three frames, caught in main, again and again: libstdc++'s __cxa_throw and
// libgcc_s's unwinder on the stack for part of every round.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

__attribute__((noinline)) int deep(long n) {
    volatile long s = 0;
    for (long i = 0; i < 2000; i++) s = s + i * n;
    if (n % 2 == 0) throw std::runtime_error("even");
    return (int)s;
}
__attribute__((noinline)) int middle(long n) { return deep(n) + 1; }
__attribute__((noinline)) int outer(long n) { return middle(n) + 1; }

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000000000L, caught = 0, sum = 0;
    for (long i = 0; i < rounds; i++) {
        try {
            sum += outer(i);
        } catch (const std::exception &e) {
            caught++;
        }
    }
    printf("%ld %ld\n", caught, sum);
    return 0;
}
