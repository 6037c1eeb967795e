/*
 * A fake libcuda.so.1 for tests: just enough of the CUDA driver API for the
 * checkpoint-state queries, reached the way cuda-bindings reaches a real
 * driver (dlsym of cuGetProcAddress_v2, then every entry point through it).
 *
 * Behaviour comes from a text file named by FAKE_CUDA_STATE, re-read on every
 * call so a test can change it while a daemon runs:
 *
 *   driver_version 12080         value of cuDriverGetVersion
 *   init_error 0                 CUresult returned by cuInit (e.g. 100 no device)
 *   pid <pid> <state> [<tid>]    a CUDA process: state 0..5 (others: a state the
 *                                bindings do not know), restore thread id
 *   deny <pid>                   queries about <pid> fail NOT_PERMITTED (800)
 *   error <pid> <code>           queries about <pid> fail with <code>, e.g. 3
 *                                (NOT_INITIALIZED: maps libcuda, never called cuInit)
 *   hang <pid> <ms>              queries about <pid> sleep first
 *
 * The deny, error and hang lines of a pid become one fault rule
 * (../fault_rules.h) on that pid: a delay, then its error (deny before error);
 * the first FR_MAX_RULES such pids get theirs.
 *
 * Unknown pids answer CUDA_ERROR_NOT_FOUND (500), as the driver does for a
 * process that is not a CUDA process. Every checkpoint entry point called is
 * appended to the file named by FAKE_CUDA_CALL_LOG, so a test can prove the
 * exporter never locks, checkpoints, restores or unlocks anything.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../fault_rules.h"

typedef int CUresult;
typedef uint64_t cuuint64_t;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_PERMITTED = 800,
};

#define MAX_PIDS 256

struct fake_pid {
    int pid;
    int state;
    int tid;
    int deny;
    int error;
    int hang_ms;
};

struct fake_state {
    int driver_version;
    int init_error;
    int npids;
    struct fake_pid pids[MAX_PIDS];
    fr_faults_t faults;
};

static int initialised;

static struct fake_pid *slot(struct fake_state *st, int pid) {
    for (int i = 0; i < st->npids; i++)
        if (st->pids[i].pid == pid)
            return &st->pids[i];
    if (st->npids == MAX_PIDS)
        return NULL;
    struct fake_pid *p = &st->pids[st->npids++];
    memset(p, 0, sizeof(*p));
    p->pid = pid;
    p->state = -1; /* not a CUDA process unless a pid line says so */
    return p;
}

static void load(struct fake_state *st) {
    memset(st, 0, sizeof(*st));
    st->driver_version = 12080;
    const char *path = getenv("FAKE_CUDA_STATE");
    if (path == NULL)
        return;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
        char key[32];
        int a = 0, b = 0, c = 0;
        int n = sscanf(line, "%31s %d %d %d", key, &a, &b, &c);
        if (n < 2)
            continue;
        if (strcmp(key, "driver_version") == 0) {
            st->driver_version = a;
        } else if (strcmp(key, "init_error") == 0) {
            st->init_error = a;
        } else if (strcmp(key, "pid") == 0 && n >= 3) {
            struct fake_pid *p = slot(st, a);
            if (p != NULL) {
                p->state = b;
                p->tid = n >= 4 ? c : 0;
            }
        } else if (strcmp(key, "deny") == 0) {
            struct fake_pid *p = slot(st, a);
            if (p != NULL)
                p->deny = 1;
        } else if (strcmp(key, "error") == 0 && n >= 3) {
            struct fake_pid *p = slot(st, a);
            if (p != NULL)
                p->error = b;
        } else if (strcmp(key, "hang") == 0 && n >= 3) {
            struct fake_pid *p = slot(st, a);
            if (p != NULL)
                p->hang_ms = b;
        }
    }
    fclose(f);
    int n = 0;
    for (int i = 0; i < st->npids && n < FR_MAX_RULES; i++) {
        const struct fake_pid *p = &st->pids[i];
        if (!p->deny && !p->error && p->hang_ms <= 0)
            continue;
        fr_rule_t *r = &st->faults.rules[n++];
        snprintf(r->fn, sizeof r->fn, "*");
        r->device = p->pid;
        r->arg = FR_ANY;
        r->error = p->deny ? CUDA_ERROR_NOT_PERMITTED : p->error;
        r->delay_ms = p->hang_ms > 0 ? (uint32_t)p->hang_ms : 0;
        r->remaining = -1;
        r->active = 1;
    }
}

static void record(const char *fn, int pid) {
    const char *path = getenv("FAKE_CUDA_CALL_LOG");
    if (path == NULL)
        return;
    FILE *f = fopen(path, "a");
    if (f == NULL)
        return;
    fprintf(f, "%s %d\n", fn, pid);
    fclose(f);
}

CUresult cuInit(unsigned int flags) {
    struct fake_state st;
    (void)flags;
    load(&st);
    if (st.init_error != 0)
        return st.init_error;
    initialised = 1;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
    struct fake_state st;
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    load(&st);
    *version = st.driver_version;
    return CUDA_SUCCESS;
}

static const char *error_name(CUresult e) {
    switch (e) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_PERMITTED: return "CUDA_ERROR_NOT_PERMITTED";
    default: return NULL;
    }
}

CUresult cuGetErrorName(CUresult error, const char **out) {
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *out = error_name(error);
    return *out != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **out) {
    return cuGetErrorName(error, out);
}

/* Common prologue of the per-process queries: initialised, known, allowed. */
static CUresult lookup(const char *fn, int pid, struct fake_state *st, struct fake_pid **found) {
    record(fn, pid);
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    load(st);
    CUresult rc = fr_apply(&st->faults, fn, pid, FR_ANY, 1);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fake_pid *p = NULL;
    for (int i = 0; i < st->npids; i++)
        if (st->pids[i].pid == pid)
            p = &st->pids[i];
    if (p == NULL || p->state < 0)
        return CUDA_ERROR_NOT_FOUND;
    *found = p;
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessGetState(int pid, int *state) {
    struct fake_state st;
    struct fake_pid *p = NULL;
    if (state == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = lookup(__func__, pid, &st, &p);
    if (r == CUDA_SUCCESS)
        *state = p->state;
    return r;
}

CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid) {
    struct fake_state st;
    struct fake_pid *p = NULL;
    if (tid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = lookup(__func__, pid, &st, &p);
    if (r == CUDA_SUCCESS)
        *tid = p->tid;
    return r;
}

/* The mutating calls: a monitor must never make them; the call log proves it. */
CUresult cuCheckpointProcessLock(int pid, void *args) {
    (void)args;
    record(__func__, pid);
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessCheckpoint(int pid, void *args) {
    (void)args;
    record(__func__, pid);
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessRestore(int pid, void *args) {
    (void)args;
    record(__func__, pid);
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessUnlock(int pid, void *args) {
    (void)args;
    record(__func__, pid);
    return CUDA_SUCCESS;
}

struct entry {
    const char *name;
    void *fn;
    int min_version; /* the driver version that introduced the entry point */
};

static const struct entry entries[] = {
    {"cuInit", (void *)cuInit, 2000},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion, 2020},
    {"cuGetErrorName", (void *)cuGetErrorName, 6000},
    {"cuGetErrorString", (void *)cuGetErrorString, 6000},
    {"cuCheckpointProcessGetState", (void *)cuCheckpointProcessGetState, 12080},
    {"cuCheckpointProcessGetRestoreThreadId", (void *)cuCheckpointProcessGetRestoreThreadId, 12080},
    {"cuCheckpointProcessLock", (void *)cuCheckpointProcessLock, 12080},
    {"cuCheckpointProcessCheckpoint", (void *)cuCheckpointProcessCheckpoint, 12080},
    {"cuCheckpointProcessRestore", (void *)cuCheckpointProcessRestore, 12080},
    {"cuCheckpointProcessUnlock", (void *)cuCheckpointProcessUnlock, 12080},
};

/* CUdriverProcAddressQueryResult */
enum { PROC_SUCCESS = 0, PROC_SYMBOL_NOT_FOUND = 1, PROC_VERSION_NOT_SUFFICIENT = 2 };

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             int *symbolStatus) {
    struct fake_state st;
    (void)cudaVersion;
    (void)flags;
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    load(&st);
    *pfn = NULL;
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        if (strcmp(entries[i].name, symbol) != 0)
            continue;
        /* An older driver simply does not have the newer entry points. */
        if (entries[i].min_version > st.driver_version) {
            if (symbolStatus != NULL)
                *symbolStatus = PROC_VERSION_NOT_SUFFICIENT;
            return CUDA_ERROR_NOT_FOUND;
        }
        *pfn = entries[i].fn;
        if (symbolStatus != NULL)
            *symbolStatus = PROC_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (symbolStatus != NULL)
        *symbolStatus = PROC_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
