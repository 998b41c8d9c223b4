/* i386 signal loop: main -> a -> b -> c spins; SIGALRM every 5 ms runs a handler that spins too,
 * so samples land in the handler, around its frame, and in rt_sigreturn. */
#include <signal.h>
#include <string.h>
#include <sys/time.h>
static volatile unsigned long sink;
__attribute__((noinline)) static void h2(void) { for (int i = 0; i < 20000; i++) sink += i; }
__attribute__((noinline)) static void h1(void) { h2(); sink++; }
static void on_alarm(int sig) { (void)sig; h1(); sink++; }
__attribute__((noinline)) static void c(void) { for (;;) sink++; }
__attribute__((noinline)) static void b(void) { c(); sink++; }
__attribute__((noinline)) static void a(void) { b(); sink++; }
int main(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, 0);
	struct itimerval it = {{0, 5000}, {0, 5000}};
	setitimer(ITIMER_REAL, &it, 0);
	a();
	return 0;
}
