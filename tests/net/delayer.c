/* A user-space delay line for the emulated network (tests/net/netns_lib.sh, wan_delay):
 * this kernel has no netem. It opens a TUN device, reads each IP packet the kernel
 * routes into it, holds it until its release time and writes it back into the same
 * device, from where the kernel routes it on. Per packet:
 *   drop with probability LOSS (counted), else
 *   release = max(now + DELAY + U(-JITTER, +JITTER), the release of the flow's last packet)
 * (never before now). The max keeps each flow in order (TCP reads reordering as loss):
 * a flow is a hash of addresses, protocol and ports into 4096 slots, so a collision
 * only adds order. Packets wait in a heap ordered by (release, arrival). The queue
 * holds at most --queue-bytes of packets; a packet that does not fit is dropped and
 * counted. SIGTERM or SIGINT: the counters, and how late packets left (the wake-ups
 * of a loaded machine), on one stderr line; exit 0.
 *
 *   delayer --dev NAME [--delay-ms D] [--jitter-ms J] [--loss P] [--seed S] [--queue-bytes B]
 *
 * The device is created (or attached, if it exists) as IFF_TUN | IFF_NO_PI; the caller
 * sets it up and routes through it. Bad flags: one line on stderr, exit 2. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define FLOW_SLOTS 4096
#define MAX_PACKET 65536

typedef struct {
  int64_t release; /* ns, CLOCK_MONOTONIC */
  uint64_t seq;    /* arrival order: ties leave in arrival order */
  uint32_t len;
  uint8_t *data;
} packet;

typedef struct {
  const char *dev;
  double delay_ms, jitter_ms, loss;
  uint64_t seed;
  uint64_t queue_bytes;
} options;

static volatile sig_atomic_t stop_requested;
static void on_stop(int sig) { (void)sig; stop_requested = 1; }

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* splitmix64: a small seeded generator; uniform() in [0, 1) */
static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double uniform(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }

/* --- the heap of waiting packets, earliest (release, seq) on top --- */
static packet *heap;
static size_t heap_n, heap_cap;

static int before(const packet *a, const packet *b) {
  return a->release < b->release || (a->release == b->release && a->seq < b->seq);
}

static int heap_push(packet p) {
  if (heap_n == heap_cap) {
    size_t cap = heap_cap ? heap_cap * 2 : 1024;
    packet *h = realloc(heap, cap * sizeof *h);
    if (!h) return -1;
    heap = h;
    heap_cap = cap;
  }
  size_t i = heap_n++;
  while (i > 0 && before(&p, &heap[(i - 1) / 2])) {
    heap[i] = heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  heap[i] = p;
  return 0;
}

static packet heap_pop(void) {
  packet top = heap[0], last = heap[--heap_n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= heap_n) break;
    if (c + 1 < heap_n && before(&heap[c + 1], &heap[c])) c++;
    if (!before(&heap[c], &last)) break;
    heap[i] = heap[c];
    i = c;
  }
  if (heap_n > 0) heap[i] = last;
  return top;
}

/* The flow slot of an IPv4 or IPv6 packet: addresses, protocol and (for TCP and UDP)
 * ports, FNV-1a hashed. Anything else hashes what it has. */
static unsigned flow_of(const uint8_t *p, size_t n) {
  uint32_t h = 2166136261u;
  size_t from = 0, to = n < 40 ? n : 40, ports = 0;
  if (n >= 20 && (p[0] >> 4) == 4) {
    size_t ihl = (size_t)(p[0] & 15) * 4;
    from = 12, to = 20;
    h = (h ^ p[9]) * 16777619u;
    if ((p[9] == 6 || p[9] == 17) && n >= ihl + 4) ports = ihl;
  } else if (n >= 40 && (p[0] >> 4) == 6) {
    from = 8, to = 40;
    h = (h ^ p[6]) * 16777619u;
    if ((p[6] == 6 || p[6] == 17) && n >= 44) ports = 40;
  }
  for (size_t i = from; i < to; i++) h = (h ^ p[i]) * 16777619u;
  if (ports)
    for (size_t i = ports; i < ports + 4; i++) h = (h ^ p[i]) * 16777619u;
  return h % FLOW_SLOTS;
}

static int bad_flag(const char *flag, const char *value, const char *want) {
  fprintf(stderr, "delayer: %s: '%s' is not %s\n", flag, value, want);
  return -1;
}

static int parse_double(const char *flag, const char *s, double lo, double hi, const char *want, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo && v <= hi)) return bad_flag(flag, s, want);
  *out = v;
  return 0;
}

static int parse_u64(const char *flag, const char *s, uint64_t lo, const char *want, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < lo) return bad_flag(flag, s, want);
  *out = v;
  return 0;
}

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.dev = NULL, .seed = 1, .queue_bytes = 32u << 20};
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    if (i + 1 >= argc) {
      fprintf(stderr, "delayer: %s: needs a value (usage: delayer --dev NAME [--delay-ms D] [--jitter-ms J] "
                      "[--loss P] [--seed S] [--queue-bytes B])\n", f);
      return -1;
    }
    const char *v = argv[++i];
    int rc;
    if (!strcmp(f, "--dev")) {
      rc = (!*v || strlen(v) >= IFNAMSIZ) ? bad_flag(f, v, "a device name of 1-15 characters") : 0;
      o->dev = v;
    } else if (!strcmp(f, "--delay-ms"))
      rc = parse_double(f, v, 0, 60000, "a delay in milliseconds in [0, 60000]", &o->delay_ms);
    else if (!strcmp(f, "--jitter-ms"))
      rc = parse_double(f, v, 0, 60000, "a jitter in milliseconds in [0, 60000]", &o->jitter_ms);
    else if (!strcmp(f, "--loss"))
      rc = parse_double(f, v, 0, 1, "a loss probability in [0, 1]", &o->loss);
    else if (!strcmp(f, "--seed"))
      rc = parse_u64(f, v, 0, "a non-negative integer seed", &o->seed);
    else if (!strcmp(f, "--queue-bytes"))
      rc = parse_u64(f, v, MAX_PACKET, "a queue size in bytes of at least 65536", &o->queue_bytes);
    else {
      fprintf(stderr, "delayer: %s: unknown flag (usage: delayer --dev NAME [--delay-ms D] [--jitter-ms J] "
                      "[--loss P] [--seed S] [--queue-bytes B])\n", f);
      return -1;
    }
    if (rc) return -1;
  }
  if (!o->dev) {
    fprintf(stderr, "delayer: --dev: missing (the TUN device's name)\n");
    return -1;
  }
  return 0;
}

static int open_tun(const char *name) {
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "delayer: /dev/net/tun: %s\n", strerror(errno));
    return -1;
  }
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    fprintf(stderr, "delayer: --dev %s: cannot create the TUN device: %s\n", name, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

typedef struct {
  uint64_t in, out, lost, full, write_errors;
  int64_t late_sum, late_max; /* ns past the release time when written */
} counters;

/* Reads every packet waiting on the device (non-blocking) into the queue. */
static int take_packets(int fd, const options *o, int64_t *flow_last, uint64_t *seq, uint64_t *queued,
                        counters *c) {
  static uint8_t buf[MAX_PACKET];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return 0;
      fprintf(stderr, "delayer: reading %s: %s\n", o->dev, strerror(errno));
      return -1;
    }
    if (n == 0) return 0;
    c->in++;
    if (o->loss > 0 && uniform() < o->loss) {
      c->lost++;
      continue;
    }
    if (*queued + (uint64_t)n > o->queue_bytes) {
      c->full++;
      continue;
    }
    double ms = o->delay_ms + (o->jitter_ms > 0 ? (2 * uniform() - 1) * o->jitter_ms : 0);
    int64_t now = now_ns(), release = now + (ms > 0 ? (int64_t)(ms * 1e6) : 0);
    unsigned flow = flow_of(buf, (size_t)n);
    if (release < flow_last[flow]) release = flow_last[flow];
    packet p = {.release = release, .seq = (*seq)++, .len = (uint32_t)n, .data = malloc((size_t)n)};
    if (!p.data || heap_push(p)) {
      free(p.data);
      c->full++;
      continue;
    }
    memcpy(p.data, buf, (size_t)n);
    flow_last[flow] = release;
    *queued += (uint64_t)n;
  }
}

/* Writes every packet whose release time has come back into the device. */
static void release_due(int fd, uint64_t *queued, counters *c) {
  int64_t now = now_ns();
  while (heap_n > 0 && heap[0].release <= now) {
    packet p = heap_pop();
    int64_t late = now - p.release;
    c->late_sum += late;
    if (late > c->late_max) c->late_max = late;
    if (write(fd, p.data, p.len) == (ssize_t)p.len)
      c->out++;
    else
      c->write_errors++;
    *queued -= p.len;
    free(p.data);
  }
}

int main(int argc, char **argv) {
  options o;
  if (parse_args(argc, argv, &o)) return 2;
  rng_state = o.seed;
  /* SIGTERM and SIGINT are blocked except inside ppoll, so none is missed between
   * the check of stop_requested and the wait */
  sigset_t block, wait_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigprocmask(SIG_BLOCK, &block, &wait_mask);
  sigdelset(&wait_mask, SIGTERM);
  sigdelset(&wait_mask, SIGINT);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  int fd = open_tun(o.dev);
  if (fd < 0) return 1;
  static int64_t flow_last[FLOW_SLOTS];
  uint64_t seq = 0, queued = 0;
  counters c = {0};
  int rc = 0;
  while (!stop_requested) {
    struct timespec wait, *timeout = NULL;
    if (heap_n > 0) {
      int64_t left = heap[0].release - now_ns();
      if (left < 0) left = 0;
      wait.tv_sec = left / 1000000000;
      wait.tv_nsec = left % 1000000000;
      timeout = &wait;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int n = ppoll(&pfd, 1, timeout, &wait_mask);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "delayer: waiting on %s: %s\n", o.dev, strerror(errno));
      rc = 1;
      break;
    }
    if (n > 0 && (pfd.revents & (POLLERR | POLLHUP | POLLNVAL))) {
      fprintf(stderr, "delayer: %s went away\n", o.dev);
      rc = 1;
      break;
    }
    if (n > 0 && take_packets(fd, &o, flow_last, &seq, &queued, &c)) {
      rc = 1;
      break;
    }
    release_due(fd, &queued, &c);
  }
  fprintf(stderr, "delayer: %s: %llu packets in, %llu out, %llu lost (--loss), %llu dropped (queue full), "
                  "%llu write errors, %zu still queued; written %.3f ms late on average, %.3f at most\n",
          o.dev, (unsigned long long)c.in,
          (unsigned long long)c.out, (unsigned long long)c.lost, (unsigned long long)c.full,
          (unsigned long long)c.write_errors, heap_n, c.out + c.write_errors ? c.late_sum / 1e6 / (double)(c.out + c.write_errors) : 0.0,
          c.late_max / 1e6);
  while (heap_n > 0) free(heap_pop().data);
  free(heap);
  close(fd);
  return rc;
}
