/*
 * perfcc: the guest kernel's own user callchains for one program, as perf_event_open gives them.
 *
 *   perfcc [-o OUT] [-s SECONDS] [-F FREQ] [-S STACK_BYTES] [-p DATA_PAGES] [-t] [-d] [-1] -- PROG [ARGS...]
 *
 * Forks PROG as a child that waits on a pipe until the events are set up, then execs it.  The
 * events follow that child (pid = child) and, inherited, its threads and children.  The kernel
 * refuses to mmap an inherited event with cpu = -1 (perf_mmap(): "all children writing to the
 * same rb"), so there is one event and one ring buffer per online CPU, as perf record does; with
 * -1 a single cpu = -1 event without inherit (the child's first thread only).  Each event is
 * disabled until the exec (enable_on_exec), a software clock at FREQ samples per second
 * (cpu-clock, or task-clock with -t: TCG emulates no PMU), with
 *   sample_type = IP | TID | TIME | CPU | CALLCHAIN | REGS_USER | STACK_USER,
 *   sample_regs_user = every general-purpose register, sample_stack_user = STACK_BYTES,
 *   exclude_callchain_kernel (only the user part of each callchain), sample_id_all and task
 *   (PERF_RECORD_FORK/EXIT, and pid/tid/time on every record).
 * With -d it also sets defer_callchain and defer_output (6.19+): the user callchain of a sample is
 * then PERF_CONTEXT_USER_DEFERRED + cookie, and the stack comes later as a
 * PERF_RECORD_CALLCHAIN_DEFERRED record.  A kernel that refuses the bits (EINVAL: reserved bits
 * set) is sampled without them and the file says "defer=unsupported".
 *
 * The ring buffers are drained while the child runs for SECONDS; then the child's /proc/PID/maps
 * is saved, the child is killed and reaped, then the rest of its process group (do_exit has
 * written their last records by then), and the buffers are drained once more.  OUT gets the raw
 * records with what is needed to read them (harness/perf/records.py):
 *
 *   "PERFCC01", then sections {char name[8]; u64 size; u8 data[size]; pad to 8}:
 *     info     key=value lines: release, page size, perf_event_max_stack, counts, ...
 *     attr     the struct perf_event_attr that was used (attr.size bytes)
 *     maps     the child's /proc/PID/maps
 *     vdso     u64 address, then this process's vDSO image (the child's is the same image)
 *     ring     u32 cpu (-1 for the cpu = -1 event), u32 0, then that ring's records in ring
 *              order, each whole (unwrapped); one section per ring buffer
 *     end      (size 0)
 *
 * Prints "perfcc: ..." and exits 0; 2 bad usage, 3 perf_event_open failed, 4 other failures.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * Bits of the perf_event_attr flags word (the u64 after read_format) that older headers lack.
 * From include/uapi/linux/perf_event.h of linux-libc-dev 7.2.13-1 (Debian sid):
 *   ... sigtrap : 1 (bit 37), defer_callchain : 1 (bit 38), defer_output : 1 (bit 39),
 *   __reserved_1 : 24.
 * main() checks at run time that sigtrap is bit 37 of that word with the header it was built with.
 */
#define ATTR_FLAGS_OFFSET 40
#define ATTR_BIT_SIGTRAP 37
#define ATTR_BIT_DEFER_CALLCHAIN 38
#define ATTR_BIT_DEFER_OUTPUT 39
#define RECORD_CALLCHAIN_DEFERRED 22 /* PERF_RECORD_CALLCHAIN_DEFERRED, same header */

/* asm/perf_regs.h: AX..SS are 0..11, DS/ES/FS/GS (12..15) are refused for 64-bit, R8..R15 16..23. */
#define REGS_MASK (((1ULL << 12) - 1) | (((1ULL << 8) - 1) << 16))

_Static_assert(offsetof(struct perf_event_attr, read_format) + 8 == ATTR_FLAGS_OFFSET,
	       "the flags word follows read_format");

static uint64_t *attr_flags(struct perf_event_attr *attr)
{
	return (uint64_t *)((char *)attr + ATTR_FLAGS_OFFSET);
}

struct buf {
	char *data;
	size_t len, cap;
};

static void buf_reserve(struct buf *b, size_t more)
{
	if (b->len + more <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 1 << 16;
	while (cap < b->len + more)
		cap *= 2;
	char *p = realloc(b->data, cap);
	if (!p) {
		fprintf(stderr, "perfcc: out of memory (%zu bytes)\n", cap);
		exit(4);
	}
	b->data = p;
	b->cap = cap;
}

static void buf_add(struct buf *b, const void *data, size_t len)
{
	buf_reserve(b, len);
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

static void buf_printf(struct buf *b, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0)
		buf_add(b, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static int read_file(const char *path, struct buf *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	out->len = 0;
	for (;;) {
		buf_reserve(out, 4096);
		ssize_t n = read(fd, out->data + out->len, 4096);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		out->len += (size_t)n;
	}
	close(fd);
	return 0;
}

static long read_long(const char *path, long dflt)
{
	struct buf b = {0};
	long v = dflt;
	if (read_file(path, &b) == 0 && b.len) {
		buf_add(&b, "", 1);
		v = strtol(b.data, NULL, 10);
	}
	free(b.data);
	return v;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* -- the ring buffers ---------------------------------------------------------------------- */
struct ring {
	int cpu, fd;
	struct perf_event_mmap_page *meta;
	char *data;
	uint64_t size;
	struct buf records;
};
static unsigned long n_samples, n_deferred, n_lost_records, n_other, n_corrupt;
static uint64_t n_lost;

static void ring_copy(const struct ring *r, void *dst, uint64_t pos, size_t len)
{
	uint64_t off = pos & (r->size - 1);
	size_t first = len < r->size - off ? len : r->size - off;
	memcpy(dst, r->data + off, first);
	memcpy((char *)dst + first, r->data, len - first);
}

/* Copy every complete record between data_tail and data_head, then hand the space back. */
static void drain(struct ring *r)
{
	uint64_t head = __atomic_load_n(&r->meta->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = r->meta->data_tail;
	struct buf *out = &r->records;
	while (tail < head) {
		struct perf_event_header h;
		ring_copy(r, &h, tail, sizeof(h));
		if (h.size < sizeof(h) || h.size > head - tail) {
			n_corrupt++;  /* cannot happen with a sane kernel; skip what is left */
			tail = head;
			break;
		}
		buf_reserve(out, h.size);
		ring_copy(r, out->data + out->len, tail, h.size);
		if (h.type == PERF_RECORD_SAMPLE) {
			n_samples++;
		} else if (h.type == RECORD_CALLCHAIN_DEFERRED) {
			n_deferred++;
		} else if (h.type == PERF_RECORD_LOST && h.size >= sizeof(h) + 16) {
			uint64_t lost;
			memcpy(&lost, out->data + out->len + sizeof(h) + 8, 8);  /* {id, lost} */
			n_lost += lost;
			n_lost_records++;
		} else {
			n_other++;
		}
		out->len += h.size;
		tail += h.size;
	}
	__atomic_store_n(&r->meta->data_tail, tail, __ATOMIC_RELEASE);
}

/* -- the output file ---------------------------------------------------------------------- */
static void section(struct buf *out, const char *name, const void *data, size_t len)
{
	char hdr[16] = {0};
	uint64_t size = len;
	strncpy(hdr, name, 8);
	memcpy(hdr + 8, &size, 8);
	buf_add(out, hdr, sizeof(hdr));
	buf_add(out, data, len);
	static const char zeros[8];
	buf_add(out, zeros, (8 - len % 8) % 8);
}

static int write_all(const char *path, const struct buf *b)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	size_t off = 0;
	while (off < b->len) {
		ssize_t n = write(fd, b->data + off, b->len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)n;
	}
	return close(fd);
}

/* This process's vDSO: {u64 address; image}. */
static void add_vdso(struct buf *out)
{
	unsigned long base = getauxval(AT_SYSINFO_EHDR);
	struct buf maps = {0}, v = {0};
	if (!base || read_file("/proc/self/maps", &maps) != 0)
		goto done;
	buf_add(&maps, "", 1);
	for (char *line = maps.data; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		unsigned long start, end;
		if (sscanf(line, "%lx-%lx", &start, &end) == 2 && start == base) {
			uint64_t addr = base;
			buf_add(&v, &addr, 8);
			buf_add(&v, (void *)base, end - start);
			break;
		}
	}
done:
	if (v.len)
		section(out, "vdso", v.data, v.len);
	free(maps.data);
	free(v.data);
}

static void usage(void)
{
	fprintf(stderr, "usage: perfcc [-o OUT] [-s SECONDS] [-F FREQ] [-S STACK_BYTES] [-p DATA_PAGES] [-t] [-d] [-1] "
			"-- PROG [ARGS...]\n");
	exit(2);
}

static pid_t child;

static void give_up(int code)
{
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	exit(code);
}

/* perf_event_open on the child for one CPU (-1: any), retried without the defer bits on EINVAL. */
static int open_event(struct perf_event_attr *attr, int cpu, const char **defer_state)
{
	int fd = syscall(SYS_perf_event_open, attr, child, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0 && errno == EINVAL && (*attr_flags(attr) >> ATTR_BIT_DEFER_CALLCHAIN & 1)) {
		/* A kernel without defer_callchain refuses the bits as reserved. */
		*attr_flags(attr) &= ~(1ULL << ATTR_BIT_DEFER_CALLCHAIN | 1ULL << ATTR_BIT_DEFER_OUTPUT);
		*defer_state = "unsupported";
		fd = syscall(SYS_perf_event_open, attr, child, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	}
	return fd;
}

int main(int argc, char **argv)
{
	const char *out_path = "/tmp/perfcc.out";
	double seconds = 3;
	long freq = 200, stack_bytes = 16384, data_pages = 256;
	int task_clock = 0, defer = 0, single = 0, opt;

	while ((opt = getopt(argc, argv, "+o:s:F:S:p:td1")) != -1) {
		switch (opt) {
		case 'o': out_path = optarg; break;
		case 's': seconds = atof(optarg); break;
		case 'F': freq = atol(optarg); break;
		case 'S': stack_bytes = atol(optarg); break;
		case 'p': data_pages = atol(optarg); break;
		case 't': task_clock = 1; break;
		case 'd': defer = 1; break;
		case '1': single = 1; break;
		default: usage();
		}
	}
	if (optind >= argc || seconds <= 0 || freq <= 0 || stack_bytes < 0 || stack_bytes > 65528 ||
	    stack_bytes % 8 || data_pages <= 0 || (data_pages & (data_pages - 1)))
		usage();
	char **child_argv = argv + optind;

	/* The flags word really is where ATTR_BIT_* count from: sigtrap must land on bit 37. */
	struct perf_event_attr probe;
	memset(&probe, 0, sizeof(probe));
	probe.sigtrap = 1;
	if (*attr_flags(&probe) != 1ULL << ATTR_BIT_SIGTRAP) {
		fprintf(stderr, "perfcc: perf_event_attr flags word is not laid out as expected\n");
		return 4;
	}

	int go[2];
	if (pipe2(go, O_CLOEXEC) != 0) {
		perror("perfcc: pipe");
		return 4;
	}
	child = fork();
	if (child < 0) {
		perror("perfcc: fork");
		return 4;
	}
	if (child == 0) {
		char c = 0;
		setpgid(0, 0);
		close(go[1]);
		while (read(go[0], &c, 1) < 0 && errno == EINTR)
			;
		if (c != 'g')
			_exit(126);  /* the parent gave up */
		execv(child_argv[0], child_argv);
		fprintf(stderr, "perfcc: exec %s: %s\n", child_argv[0], strerror(errno));
		_exit(127);
	}
	close(go[0]);
	setpgid(child, child);  /* either of the two setpgid calls wins the race; both ask the same */

	struct perf_event_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = task_clock ? PERF_COUNT_SW_TASK_CLOCK : PERF_COUNT_SW_CPU_CLOCK;
	attr.freq = 1;
	attr.sample_freq = freq;
	attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
			   PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
	attr.sample_regs_user = REGS_MASK;
	attr.sample_stack_user = stack_bytes;
	attr.exclude_callchain_kernel = 1;
	attr.exclude_hv = 1;
	attr.disabled = 1;
	attr.enable_on_exec = 1;
	attr.inherit = !single;
	attr.task = 1;
	attr.sample_id_all = 1;
	attr.watermark = 1;
	const char *defer_state = "off";
	if (defer) {
		*attr_flags(&attr) |= 1ULL << ATTR_BIT_DEFER_CALLCHAIN | 1ULL << ATTR_BIT_DEFER_OUTPUT;
		defer_state = "on";
	}

	long page = sysconf(_SC_PAGESIZE);
	uint64_t data_size = (uint64_t)data_pages * page;
	attr.wakeup_watermark = data_size / 4;
	int nrings = single ? 1 : (int)sysconf(_SC_NPROCESSORS_ONLN);
	struct ring *rings = calloc(nrings, sizeof(*rings));
	struct pollfd *pfds = calloc(nrings, sizeof(*pfds));
	if (!rings || !pfds || nrings <= 0) {
		fprintf(stderr, "perfcc: no CPUs or no memory\n");
		give_up(4);
	}
	for (int i = 0; i < nrings; i++) {
		struct ring *r = &rings[i];
		r->cpu = single ? -1 : i;
		r->fd = open_event(&attr, r->cpu, &defer_state);
		if (r->fd < 0) {
			fprintf(stderr, "perfcc: perf_event_open (cpu %d): %s\n", r->cpu, strerror(errno));
			give_up(3);
		}
		void *base = mmap(NULL, (data_pages + 1) * page, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
		if (base == MAP_FAILED) {
			fprintf(stderr, "perfcc: mmap (cpu %d): %s\n", r->cpu, strerror(errno));
			give_up(4);
		}
		r->meta = base;
		r->data = (char *)base + (r->meta->data_offset ? r->meta->data_offset : (uint64_t)page);
		r->size = r->meta->data_size ? r->meta->data_size : data_size;
		pfds[i].fd = r->fd;
		pfds[i].events = POLLIN;
	}

	if (write(go[1], "g", 1) != 1) {
		perror("perfcc: start the child");
		give_up(4);
	}
	close(go[1]);

	char maps_path[64];
	snprintf(maps_path, sizeof(maps_path), "/proc/%d/maps", (int)child);
	struct buf maps = {0}, tmp = {0};
	int status = 0, exited = 0;
	double start = now();
	while (now() - start < seconds) {
		poll(pfds, nrings, 20);
		for (int i = 0; i < nrings; i++)
			drain(&rings[i]);
		if (!maps.len && n_samples && read_file(maps_path, &tmp) == 0) {
			struct buf t = maps;  /* the address space once the exec is done (a sample came) */
			maps = tmp;
			tmp = t;
		}
		if (waitpid(child, &status, WNOHANG) == child) {
			exited = 1;
			break;
		}
	}
	if (!exited) {
		if (read_file(maps_path, &tmp) == 0 && tmp.len) {
			struct buf t = maps;  /* the address space as it is at the end */
			maps = tmp;
			tmp = t;
		}
		kill(child, SIGKILL);
		while (waitpid(child, &status, 0) < 0 && errno == EINTR)
			;
	}
	/* What the child left in its process group (inherited children): give them up to a second to
	 * get through do_exit (a zombie still answers kill 0, so at worst the second runs out). */
	if (kill(-child, SIGKILL) == 0)
		for (int i = 0; i < 50 && kill(-child, 0) == 0; i++)
			usleep(20000);
	/* do_exit has written the last deferred records and PERF_RECORD_EXIT before the reap. */
	for (int i = 0; i < nrings; i++) {
		drain(&rings[i]);
		ioctl(rings[i].fd, PERF_EVENT_IOC_DISABLE, 0);
		drain(&rings[i]);
	}

	struct utsname uts;
	uname(&uts);
	struct buf info = {0};
	size_t total = 0;
	for (int i = 0; i < nrings; i++)
		total += rings[i].records.len;
	buf_printf(&info, "release=%s\n", uts.release);
	buf_printf(&info, "page_size=%ld\n", page);
	buf_printf(&info, "data_pages=%ld\n", data_pages);
	buf_printf(&info, "rings=%d\n", nrings);
	buf_printf(&info, "max_stack=%ld\n", read_long("/proc/sys/kernel/perf_event_max_stack", -1));
	buf_printf(&info, "max_contexts_per_stack=%ld\n",
		   read_long("/proc/sys/kernel/perf_event_max_contexts_per_stack", -1));
	buf_printf(&info, "ncpus=%ld\n", sysconf(_SC_NPROCESSORS_ONLN));
	buf_printf(&info, "child_pid=%d\n", (int)child);
	buf_printf(&info, "argv=");
	for (char **a = child_argv; *a; a++)
		buf_printf(&info, "%s%s", a == child_argv ? "" : " ", *a);
	buf_printf(&info, "\nseconds=%g\nfreq=%ld\nclock=%s\n", seconds, freq, task_clock ? "task" : "cpu");
	buf_printf(&info, "stack_bytes=%ld\ndefer=%s\n", stack_bytes, defer_state);
	buf_printf(&info, "samples=%lu\ndeferred=%lu\nlost=%llu\nlost_records=%lu\nother=%lu\ncorrupt=%lu\n",
		   n_samples, n_deferred, (unsigned long long)n_lost, n_lost_records, n_other, n_corrupt);
	buf_printf(&info, "child_ended=%s\n", exited ? "exited" : "killed");
	if (WIFEXITED(status))
		buf_printf(&info, "child_status=exit %d\n", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		buf_printf(&info, "child_status=signal %d\n", WTERMSIG(status));

	struct buf out = {0};
	buf_add(&out, "PERFCC01", 8);
	section(&out, "info", info.data, info.len);
	section(&out, "attr", &attr, attr.size);
	section(&out, "maps", maps.data, maps.len);
	add_vdso(&out);
	for (int i = 0; i < nrings; i++) {
		struct buf ring = {0};
		int32_t hdr[2] = {rings[i].cpu, 0};
		buf_add(&ring, hdr, sizeof(hdr));
		buf_add(&ring, rings[i].records.data, rings[i].records.len);
		section(&out, "ring", ring.data, ring.len);
		free(ring.data);
	}
	section(&out, "end", "", 0);
	if (write_all(out_path, &out) != 0) {
		fprintf(stderr, "perfcc: write %s: %s\n", out_path, strerror(errno));
		return 4;
	}
	printf("perfcc: %lu samples, %lu deferred, %llu lost, %zu bytes of records in %d rings, defer %s -> %s\n",
	       n_samples, n_deferred, (unsigned long long)n_lost, total, nrings, defer_state, out_path);
	return 0;
}
