/* TVM's parallel loops on a pool in which the caller never waits for a worker that has not started.

   TVM's own launcher gives worker i task i and joins on all of them: when another process holds a worker's core,
   every parallel kernel waits for that worker's next time slice (a 0.2 ms model ran 66 ms beside two busy
   processes). Here a loop is cut into `threads * chunks_per_thread` chunks that the caller and the running workers
   claim one at a time from an atomic counter; the caller runs what nobody claimed and waits only for chunks that
   are being run. A worker spins for `spin_ns` after its last chunk (the next kernel of a model comes within
   microseconds) and then sleeps on a futex, so nothing spins between inferences. A worker woken on the caller's
   core moves off it at once: left to the scheduler it shared that core with the caller for ~4 ms (a load-balancing
   tick), and the first ~7 inferences after a pause ran serially (convnet_small 0.6 ms instead of 0.33).

   Installed by workbench/runtime/launcher.py into a loaded model library's `__TVMBackendParallelLaunch`. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct { void* sync_handle; int32_t num_task; } Env;  /* TVMParallelGroupEnv */
typedef int (*Lambda)(int task_id, Env* penv, void* cdata);      /* FTVMParallelLambda */

static _Atomic uint64_t state;         /* generation << 32 | the next unclaimed chunk */
static _Atomic uint32_t published;     /* the futex word: the latest generation */
static _Atomic int sleepers, done, failure;
static _Atomic int caller_cpu = -1;    /* the core the caller woke the workers from */
static cpu_set_t allowed;              /* the cores the pool's first caller could run on */
static int allowed_count;
static atomic_flag in_flight = ATOMIC_FLAG_INIT;  /* one launch at a time: another caller's runs serially */
static Lambda job_lambda;
static void* job_data;
static int job_chunks;
static uint32_t generation;            /* the launching thread's */
static int threads = 1, chunks_per_thread = 1, started = 0;
static long spin_ns = 200000;
static __thread int inside;            /* a launch from inside a chunk runs serially */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void run_chunks(uint32_t gen) {
  for (;;) {
    uint64_t s = atomic_load_explicit(&state, memory_order_acquire);
    if ((uint32_t)(s >> 32) != gen || (uint32_t)s >= (uint32_t)job_chunks) return;
    if (!atomic_compare_exchange_weak_explicit(&state, &s, s + 1, memory_order_acq_rel, memory_order_relaxed))
      continue;
    /* chunk (uint32_t)s of this generation is ours: the job cannot end, nor its fields change, before it is done */
    Env env = {0, job_chunks};
    inside = 1;
    int rc = job_lambda((int)(uint32_t)s, &env, job_data);
    inside = 0;
    if (rc) atomic_store(&failure, rc);
    atomic_fetch_add_explicit(&done, 1, memory_order_acq_rel);
  }
}

/* Woken on the core the caller runs on (the scheduler's wake-up placement), the worker would take turns with the
   caller there instead of running beside it: it moves to the pool's other cores. */
static void leave_callers_core(void) {
  int theirs = atomic_load(&caller_cpu);
  if (allowed_count < 2 || theirs < 0 || sched_getcpu() != theirs) return;
  cpu_set_t elsewhere = allowed;
  CPU_CLR(theirs, &elsewhere);
  sched_setaffinity(0, sizeof elsewhere, &elsewhere);
}

static void* worker(void* unused) {
  (void)unused;
  uint32_t seen = atomic_load(&published);
  for (;;) {
    long since = now_ns();
    for (int spins = 1;; ++spins) {
      uint32_t gen = atomic_load(&published);
      if (gen != seen) {
        seen = gen;
        run_chunks(gen);
        since = now_ns();
        continue;
      }
      if ((spins & 63) == 0 && now_ns() - since > spin_ns) break;
      cpu_relax();
    }
    atomic_fetch_add(&sleepers, 1);
    syscall(SYS_futex, &published, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
    atomic_fetch_sub(&sleepers, 1);
    leave_callers_core();
  }
  return NULL;
}

static void start_workers(void) {
  pthread_mutex_lock(&start_lock);
  if (!allowed_count && sched_getaffinity(0, sizeof allowed, &allowed) == 0) allowed_count = CPU_COUNT(&allowed);
  for (; started < threads - 1; ++started) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, worker, NULL) != 0) break;  /* fewer workers: the caller runs their chunks */
    pthread_detach(thread);
  }
  pthread_mutex_unlock(&start_lock);
}

static void forked_child(void) {  /* a forked child has the caller only: its workers start afresh */
  started = 0;
  allowed_count = 0;
  atomic_store(&sleepers, 0);
  atomic_flag_clear(&in_flight);
  pthread_mutex_init(&start_lock, NULL);
}

/* TVMBackendParallelLaunch's signature; num_task (0: one task per thread) is not used. */
int wb_parallel_launch(Lambda lambda, void* data, int num_task) {
  (void)num_task;
  if (inside || threads <= 1 || atomic_flag_test_and_set(&in_flight)) {
    Env env = {0, 1};
    return lambda(0, &env, data);
  }
  if (started < threads - 1) start_workers();
  job_lambda = lambda;
  job_data = data;
  job_chunks = threads * chunks_per_thread;
  atomic_store(&done, 0);
  atomic_store(&failure, 0);
  uint32_t gen = ++generation;
  atomic_store_explicit(&state, (uint64_t)gen << 32, memory_order_release);
  atomic_store(&published, gen);
  if (atomic_load(&sleepers)) {
    atomic_store(&caller_cpu, sched_getcpu());
    syscall(SYS_futex, &published, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
  }
  run_chunks(gen);
  /* chunks still running: a worker preempted in its chunk is waited for (pause, then yield the core) */
  for (int spins = 0; atomic_load_explicit(&done, memory_order_acquire) < job_chunks; ++spins) {
    if (spins < 4096) cpu_relax(); else sched_yield();
  }
  int rc = atomic_load(&failure);
  atomic_flag_clear(&in_flight);
  return rc;
}

/* The thread count (the caller included), chunks per thread and the workers' spin; the first call registers the
   fork handler. */
void wb_configure(int thread_count, int chunks, long spin_microseconds) {
  static int registered = 0;
  if (!registered) registered = pthread_atfork(NULL, NULL, forked_child) == 0;
  threads = thread_count;
  chunks_per_thread = chunks;
  spin_ns = spin_microseconds * 1000L;
}

/* Workers started so far (a test's window into the pool). */
int wb_workers(void) { return started; }
