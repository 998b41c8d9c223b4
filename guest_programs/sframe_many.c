/*
 * Thousands of small functions for the SFrame decoder: 3000 generated functions f1000..f3999
 * (a large FDE table, binary search over it) in four shapes chosen by n % 4:
 *   0: a leaf;  1: a volatile stack buffer of n % 13 * 37 + 8 bytes (CFA offsets past 127, so
 *   2-byte data words);  2: a call through a pointer (a non-leaf frame);  3: 300 bytes of nops
 *   (functions past 255 bytes, so 2-byte FRE start addresses; the other shapes get one nop).
 * Plus big_frame() (a 40000-byte frame: 4-byte data words) and huge_body() (70000 bytes of nops:
 * 4-byte FRE start addresses).
 *
 *   sframe_many [N]   calls the first N generated functions (default 3000), prints
 *                     "sframe_many: done" and exits 0.
 */
#include <stdio.h>
#include <stdlib.h>

static volatile long sink;
static long leaf(long x) { return x + 1; }
static long (*volatile next_fn)(long) = leaf;

#define F(n)                                                                   \
	__attribute__((noinline)) long f##n(long x)                            \
	{                                                                      \
		volatile char buf[((n) % 4 == 1) ? ((n) % 13) * 37 + 8 : 1];   \
		buf[0] = (char)x;                                              \
		__asm__ volatile(".skip %c0, 0x90" : : "i"(((n) % 4 == 3) ? 300 : 1)); \
		if ((n) % 4 == 2)                                              \
			return next_fn(x) + (n);                               \
		return x * (n) + buf[0];                                       \
	}
#define T(n) f##n,
#define D10(M, p) M(p##0) M(p##1) M(p##2) M(p##3) M(p##4) M(p##5) M(p##6) M(p##7) M(p##8) M(p##9)
#define D100(M, p) D10(M, p##0) D10(M, p##1) D10(M, p##2) D10(M, p##3) D10(M, p##4) \
	D10(M, p##5) D10(M, p##6) D10(M, p##7) D10(M, p##8) D10(M, p##9)
#define D1000(M, p) D100(M, p##0) D100(M, p##1) D100(M, p##2) D100(M, p##3) D100(M, p##4) \
	D100(M, p##5) D100(M, p##6) D100(M, p##7) D100(M, p##8) D100(M, p##9)

D1000(F, 1) D1000(F, 2) D1000(F, 3)

static long (*const table[])(long) = { D1000(T, 1) D1000(T, 2) D1000(T, 3) };
#define NFUNCS ((int)(sizeof table / sizeof table[0]))

__attribute__((noinline)) long big_frame(long x)
{
	volatile char buf[40000];
	buf[x % sizeof buf] = (char)x;
	return next_fn(x) + buf[0];
}

__attribute__((noinline)) long huge_body(long x)
{
	volatile char buf[64];
	buf[0] = (char)x;
	__asm__ volatile(".skip 70000, 0x90");
	return next_fn(x) + buf[0];
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : NFUNCS;
	for (int i = 0; i < n && i < NFUNCS; i++)
		sink += table[i](i);
	sink += big_frame(n) + huge_body(n);
	puts("sframe_many: done");
	return 0;
}
