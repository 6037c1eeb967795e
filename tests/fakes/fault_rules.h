/* Fault rules shared by every fake vendor library under tests/fakes/.
 *
 * A fake keeps its devices in a state file that the test maps too (the file is
 * named by an environment variable, FAKE_<VENDOR>_STATE); the file holds one
 * fr_faults_t: the call counter, the release generation and the rule table. On
 * entry, an entry point runs fr_apply(faults, __func__, device, arg, may_hang):
 * every live rule that matches the call applies in table order, a delay first,
 * then a hang, then a crash or an error code; the first error is the call's
 * answer. tests/fakes/fault_rules.py mirrors these structs with ctypes and
 * writes the rules; a rule goes live when its `active` is set, last.
 *
 * Hangs poll the shared memory (never a process-local lock): the test that
 * releases them usually lives in another process than the hung call. The
 * sources include this file as "../fault_rules.h", so a plain `gcc fake.c`
 * builds them (no include path to pass).
 */
#ifndef FAKE_FAULT_RULES_H
#define FAKE_FAULT_RULES_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FR_MAX_RULES 32
#define FR_FN_LEN 64
#define FR_PATH_LEN 4096
/* device / arg of a rule: any. */
#define FR_ANY (-1)
/* error of a rule: the call crashes its process (SIGSEGV), as a driver bug does. */
#define FR_CRASH (-11)
/* How often a hung call looks whether it was released. */
#define FR_POLL_NS 5000000L

/* One rule: calls of `fn` ("*": every entry point) on `device` (FR_ANY: any; a
 * fake may give calls without a device a number of its own, e.g. NVML's -2)
 * with argument `arg` (FR_ANY: any; e.g. amdsmi's sensor or RAS block). Once
 * more than `after_calls` matching calls were made, each of its `remaining`
 * uses (-1: forever, 0: spent) sleeps `delay_ms`, hangs when `hang` is set, then
 * answers `error` (0: the call goes on). Every field is naturally aligned. */
typedef struct {
    int32_t active;       /* 0: a free slot */
    int32_t device;
    int64_t arg;
    int32_t error;
    int32_t hang;         /* block until the rule is cleared or released */
    int32_t remaining;
    uint32_t after_calls;
    uint32_t matched;     /* matching calls so far (written by the fake) */
    uint32_t delay_ms;
    char fn[FR_FN_LEN];
} fr_rule_t;

typedef struct {
    uint64_t calls;              /* calls served; what counts is the fake's (written by it) */
    uint32_t release_generation; /* a test bumps it to release every hung call */
    uint32_t hangs_entered;      /* calls that started hanging so far (written by the fake) */
    uint32_t hung_now;           /* calls hanging now (written by the fake) */
    uint32_t fr_pad;             /* named apart: the mirrors flatten this struct into the state */
    fr_rule_t rules[FR_MAX_RULES];
} fr_faults_t;

static inline void fr_sleep_ns(long ns) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline void fr_count(fr_faults_t *f) { __atomic_add_fetch(&f->calls, 1, __ATOMIC_RELAXED); }

static inline int fr_matches(const volatile fr_rule_t *r, const char *fn, int dev, int64_t arg) {
    if (!r->active || (r->device != FR_ANY && r->device != dev))
        return 0;
    if (r->arg != FR_ANY && r->arg != arg)
        return 0;
    const char *want = (const char *)r->fn;
    return strncmp(want, "*", FR_FN_LEN) == 0 || strncmp(want, fn, FR_FN_LEN) == 0;
}

/* Counts a matching call; 1 when the rule applies to it (past after_calls, and
 * a use left, taken atomically so that concurrent calls never overspend). */
static inline int fr_claim(volatile fr_rule_t *r) {
    uint32_t seen = __atomic_add_fetch(&r->matched, 1, __ATOMIC_ACQ_REL);
    if (seen <= r->after_calls)
        return 0;
    int32_t left = __atomic_load_n(&r->remaining, __ATOMIC_ACQUIRE);
    while (left != 0) {
        if (left < 0)
            return 1;
        if (__atomic_compare_exchange_n(&r->remaining, &left, left - 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return 1;
    }
    return 0;
}

/* Blocks until the rule is cleared (active or hang reset) or a release is
 * requested (release_generation moves). */
static inline void fr_hang(fr_faults_t *f, volatile fr_rule_t *r) {
    uint32_t gen = __atomic_load_n(&f->release_generation, __ATOMIC_ACQUIRE);
    __atomic_add_fetch(&f->hangs_entered, 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&f->hung_now, 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(&f->release_generation, __ATOMIC_ACQUIRE) == gen && r->active && r->hang)
        fr_sleep_ns(FR_POLL_NS);
    __atomic_sub_fetch(&f->hung_now, 1, __ATOMIC_ACQ_REL);
}

/* Applies the rules to a call of `fn` on `dev` with `arg`; the error code to
 * answer, or 0. Without `may_hang` hangs are skipped (a rule on one entry of a
 * batched call, e.g. an NVML field value). A rule cleared while its call hung
 * no longer applies. */
static inline int fr_apply(fr_faults_t *f, const char *fn, int dev, int64_t arg, int may_hang) {
    for (int i = 0; i < FR_MAX_RULES; i++) {
        volatile fr_rule_t *r = &f->rules[i];
        if (!fr_matches(r, fn, dev, arg) || !fr_claim(r))
            continue;
        if (r->delay_ms)
            fr_sleep_ns((long)r->delay_ms * 1000000L);
        if (r->hang && may_hang) {
            fr_hang(f, r);
            if (!r->active)
                continue;
        }
        if (r->error == FR_CRASH)
            raise(SIGSEGV);
        if (r->error)
            return r->error;
    }
    return 0;
}

/* Maps the state file at `path` (MAP_SHARED, `size` bytes) when it is at least
 * that large and starts with `magic`; NULL otherwise, with errno set. */
static inline void *fr_map_state(const char *path, size_t size, uint32_t magic) {
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < size) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return NULL;
    if (*(const uint32_t *)m != magic) {
        munmap(m, size);
        errno = EINVAL;
        return NULL;
    }
    return m;
}

/* Follows the state file named by $`env`: *state stays when it is that file
 * already, else becomes the new file's mapping (the old one unmapped), so the
 * next in-process test's init picks up its own state. 1: *state was that file
 * already; 2: it is now; 0: no usable file (*state unchanged). `mapped` holds
 * the path mapped (FR_PATH_LEN bytes). */
static inline int fr_follow_env(const char *env, size_t size, uint32_t magic, void **state,
                                char *mapped) {
    const char *path = getenv(env);
    if (path == NULL || *path == '\0')
        return 0;
    if (*state != NULL && strcmp(path, mapped) == 0)
        return 1;
    void *m = fr_map_state(path, size, magic);
    if (m == NULL)
        return 0;
    if (*state != NULL)
        munmap(*state, size);
    *state = m;
    snprintf(mapped, FR_PATH_LEN, "%s", path);
    return 2;
}

#endif
