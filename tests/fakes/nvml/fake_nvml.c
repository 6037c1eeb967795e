/*
 * A fake libnvidia-ml.so.1 for tests: serves 1..16 simulated GPUs to the real
 * nvidia-ml-py (pynvml) and injects faults. Build (the test fixture does this):
 *
 *   gcc -shared -fPIC -O1 -Wall -Werror -pthread -Wl,-soname,libnvidia-ml.so.1 \
 *       -o <dir>/libnvidia-ml.so.1 fake_nvml.c
 *
 * State lives in the file named by $FAKE_NVML_STATE (struct in
 * nvml_fake_state.h, created by fake_nvml_state_init() or the Python helper
 * tests/fakes/nvml/control.py) and is re-read on every call, so a test can
 * change devices and faults while a daemon runs. Without $FAKE_NVML_STATE the
 * fake serves $FAKE_NVML_DEVICES (default 1) default devices from memory.
 *
 * Only the structs and entry points the exporter needs are declared here; their
 * sizes are asserted against the values of the real nvml.h (13.x) below, and
 * fake_nvml_layout() lets a test compare them with pynvml's ctypes classes.
 *
 * Protocol details kept as the real library has them: two-call process lists
 * (INSUFFICIENT_SIZE with the count), per-entry status in field values, TIMEOUT
 * from event waits, NOT_FOUND for empty MIG slots and for "no new samples".
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nvml_fake_state.h"

#define EXPORT __attribute__((visibility("default")))

/* nvmlReturn_t values used here (nvml.h). */
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

/* ---- the subset of nvml.h structs the exporter uses ---------------------- */

typedef struct nvmlDevice_st {
    int index;
    int mig; /* -1 for the GPU itself, else the MIG slot */
} *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int version;
    int sensorType;
    int temperature;
} nvmlTemperature_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned int valueType, nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct fake_event_set *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

typedef struct fake_gpm_sample *nvmlGpmSample_t;

typedef struct {
    const char *shortName, *longName, *unit;
} nvmlGpmMetricInfo_t;

typedef struct {
    unsigned int metricId;
    unsigned int nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;

#define NVML_GPM_METRIC_MAX 477
typedef struct {
    unsigned int version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

typedef struct {
    unsigned int version, isSupportedDevice;
} nvmlGpmSupport_t;

/* nvmlGpuFabricInfo_v3_t */
typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    unsigned int status;
    unsigned int cliqueId;
    unsigned int state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;

typedef struct {
    unsigned int version;
    int marginTemperature;
} nvmlMarginTemperature_v1_t;

/* nvmlPlatformInfo_v2_t */
typedef struct {
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char chassisSerialNumber[16];
    unsigned char slotNumber, trayIndex, hostId, peerType, moduleId;
} nvmlPlatformInfo_v2_t;

typedef struct {
    unsigned int version;
    unsigned long long aggregateUncParity, aggregateUncSecDed, aggregateCor;
    unsigned long long volatileUncParity, volatileUncSecDed, volatileCor;
    unsigned long long aggregateUncBucketL2, aggregateUncBucketSm, aggregateUncBucketPcie;
    unsigned long long aggregateUncBucketMcu, aggregateUncBucketOther;
    unsigned int bThresholdExceeded;
} nvmlEccSramErrorStatus_v1_t;

/* Sizes of the real nvml.h (13.5) on x86-64: a drift here is a build error. */
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t");
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t");
_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t");
_Static_assert(sizeof(nvmlGpmMetric_t) == 40, "nvmlGpmMetric_t");
_Static_assert(sizeof(nvmlGpmMetricsGet_t) == 24 + 40 * NVML_GPM_METRIC_MAX, "nvmlGpmMetricsGet_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_v3_t) == 40, "nvmlGpuFabricInfo_v3_t");
_Static_assert(sizeof(nvmlPlatformInfo_v2_t) == 44, "nvmlPlatformInfo_v2_t");
_Static_assert(sizeof(nvmlMarginTemperature_v1_t) == 8, "nvmlMarginTemperature_v1_t");
_Static_assert(sizeof(nvmlEccSramErrorStatus_v1_t) == 104, "nvmlEccSramErrorStatus_v1_t");

#define MEMORY_V2_VERSION 0x02000028u
#define TEMPERATURE_V1_VERSION 0x0100000Cu
#define FABRIC_INFO_V3_VERSION 0x03000028u
#define PLATFORM_INFO_V2_VERSION 0x0200002Cu
#define MARGIN_TEMPERATURE_V1_VERSION 0x01000008u
#define SRAM_ECC_STATUS_V1_VERSION 0x01000068u
#define SUPPORTED_EVENTS (0x1ull | 0x2ull | 0x8ull | 0x4000ull | 0x8000ull)

/* ---- state ---------------------------------------------------------------- */

static fake_state_t *S;
static int init_count;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct nvmlDevice_st gpu_handles[FAKE_MAX_DEVICES];
static struct nvmlDevice_st mig_handles[FAKE_MAX_DEVICES][FAKE_MAX_MIG];

struct fake_event_set {
    uint64_t cursor;
    uint64_t types[FAKE_MAX_DEVICES];
};

/* GPM_FULL_GPU in gpu_instance: a sample of the whole GPU (nvmlGpmSampleGet). */
#define GPM_FULL_GPU 0xFFFFFFFFu

struct fake_gpm_sample {
    int valid;
    int device;
    unsigned int gpu_instance;
    unsigned long long taken_us;
    unsigned long long sequence; /* order of the samples taken, to check sample1 < sample2 */
    double util, sm, dram;
    double values[FAKE_GPM_IDS]; /* the device's GPM values when the sample was taken */
};

static unsigned long long gpm_sequence;

/* The GPM metric ids the fake serves on a full GPU (an H100's set); others NOT_SUPPORTED. */
static int gpm_known(unsigned int id) {
    return (id >= 1 && id <= 13) || id == 20 || id == 21 || (id >= 30 && id <= 37) ||
           (id >= 40 && id <= 47) || id == 50 || id == 51 || (id >= 60 && id <= 97) ||
           (id >= 166 && id <= 169);
}

static unsigned long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
}

static void fill_device(fake_device_t *d, unsigned i) {
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof d->name, "NVIDIA H100 80GB HBM3");
    snprintf(d->uuid, sizeof d->uuid, "GPU-%08x-1111-2222-3333-%012x", 0xa1b2c300u + i, 0x4455u + i);
    snprintf(d->serial, sizeof d->serial, "1654922%06u", 1000 + i);
    snprintf(d->vbios, sizeof d->vbios, "96.00.99.00.%02u", 1 + i);
    d->ecc_enabled = 1;
    d->pci_domain = 0;
    d->pci_bus = 0x18 + i * 0x0c;
    d->pci_device = 0;
    d->pci_device_id = 0x233010DEu;
    d->pci_subsystem_id = 0x16C110DEu;
    d->util_gpu = (37 + 5 * i) % 101;
    d->util_memory = 12 + i;
    d->memory_total = 85520809984ull; /* 81559 MiB */
    d->memory_reserved = 536870912ull;
    d->memory_used = 1073741824ull * (i + 1);
    d->temperature_gpu = 34 + i;
    d->temperature_memory = 40 + i;
    d->power_mw = 312456 + 1000 * i;
    d->power_limit_mw = 700000;
    d->energy_mj = 123456789ull + i;
    d->clock_mhz[0] = 1755;
    d->clock_mhz[1] = 1755;
    d->clock_mhz[2] = 2619;
    d->clock_mhz[3] = 1545;
    d->max_clock_mhz[0] = 1980;
    d->max_clock_mhz[1] = 1980;
    d->max_clock_mhz[2] = 2619;
    d->max_clock_mhz[3] = 1965;
    d->pstate = 0;
    d->pcie_tx_kbs = 2048;
    d->pcie_rx_kbs = 4096;
    d->pcie_gen = d->pcie_max_gen = 5;
    d->pcie_width = d->pcie_max_width = 16;
    d->clocks_event_reasons = 0x4; /* SwPowerCap */
    d->violation_ns[0] = 1500000000ull; /* power: 1.5 s */
    d->violation_ns[6] = 250000000ull;  /* sw thermal: 0.25 s */
    d->ecc[0][0] = 3;
    d->ecc[0][1] = 17;
    d->nvlink_count = FAKE_MAX_NVLINKS;
    d->nvlink_active_mask = (1u << FAKE_MAX_NVLINKS) - 1u;
    for (unsigned l = 0; l < FAKE_MAX_NVLINKS; l++) {
        d->nvlink_tx_kib[l] = 1000ull * (l + 1);
        d->nvlink_rx_kib[l] = 2000ull * (l + 1);
    }
    d->gpm_supported = 1;
    for (unsigned id = 0; id < FAKE_GPM_IDS; id++)
        d->gpm_value[id] = gpm_known(id) ? (double)((id * 7 + i * 3) % 100) + 0.5 : 0.0;
    d->fabric_state = 0; /* NOT_SUPPORTED: no NVSwitch fabric (HGX without NVL) */
    d->fabric_cluster = 0xab;
    d->margin_temperature = 40 - (int)i;
    d->margin_supported = 1;
    d->power_min_mw = 200000;
    d->power_max_mw = 700000;
    d->power_default_mw = 700000;
}

static void fill_defaults(fake_state_t *s, unsigned n) {
    memset(s, 0, sizeof(*s));
    s->magic = FAKE_NVML_MAGIC;
    s->version = FAKE_NVML_VERSION;
    s->device_count = n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : n;
    snprintf(s->driver_version, sizeof s->driver_version, "580.82.07");
    s->cuda_driver_version = 12080;
    for (unsigned i = 0; i < FAKE_MAX_DEVICES; i++)
        fill_device(&s->devices[i], i);
}

/* Map the state file (or build defaults in memory); 0 or an NVML error. */
static int attach(void) {
    if (S != NULL)
        return NVML_SUCCESS;
    const char *path = getenv("FAKE_NVML_STATE");
    if (path == NULL || *path == '\0') {
        const char *count = getenv("FAKE_NVML_DEVICES");
        fake_state_t *mem = calloc(1, sizeof(fake_state_t));
        if (mem == NULL)
            return NVML_ERROR_UNKNOWN;
        fill_defaults(mem, count ? (unsigned)atoi(count) : 1u);
        S = mem;
        return NVML_SUCCESS;
    }
    fake_state_t *s = fr_map_state(path, sizeof(fake_state_t), FAKE_NVML_MAGIC);
    if (s == NULL || s->version != FAKE_NVML_VERSION) {
        fprintf(stderr, "fake nvml: %s is no state file of this fake (%s)\n", path,
                s == NULL ? strerror(errno) : "another version");
        if (s != NULL)
            munmap(s, sizeof(fake_state_t));
        return NVML_ERROR_UNKNOWN;
    }
    S = s;
    return NVML_SUCCESS;
}

/* Entry check for every call: initialised, rules, lost devices. */
static int guard(const char *fn, int dev, int lookup) {
    if (S == NULL || init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    fr_count(&S->faults);
    if (dev >= 0)
        __atomic_add_fetch(&S->devices[dev].calls, 1, __ATOMIC_RELAXED);
    int rc = fr_apply(&S->faults, fn, dev, FR_ANY, 1);
    if (rc)
        return rc;
    if (dev >= 0) {
        uint32_t lost = S->devices[dev].lost;
        if (lost == 1 || (lost == 2 && !lookup))
            return NVML_ERROR_GPU_IS_LOST;
    }
    return NVML_SUCCESS;
}

/* Resolve a handle and run the guard; MIG handles only when allow_mig. */
static int enter(const char *fn, nvmlDevice_t h, int allow_mig, fake_device_t **d, int *mig) {
    if (S == NULL || init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (h == NULL || h->index < 0 || h->index >= (int)S->device_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    int rc = guard(fn, h->index, 0);
    if (rc)
        return rc;
    *d = &S->devices[h->index];
    if (mig)
        *mig = h->mig;
    if (h->mig >= 0) {
        if (!allow_mig)
            return NVML_ERROR_NOT_SUPPORTED;
        if (!(*d)->mig_mode || !(*d)->mig[h->mig].present)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

#define ENTER(h)                                              \
    fake_device_t *d;                                         \
    do {                                                      \
        int rc_ = enter(__func__, (h), 0, &d, NULL);          \
        if (rc_)                                              \
            return rc_;                                       \
    } while (0)

#define ENTER_MIG(h, mig)                                     \
    fake_device_t *d;                                         \
    int mig;                                                  \
    do {                                                      \
        int rc_ = enter(__func__, (h), 1, &d, &mig);          \
        if (rc_)                                              \
            return rc_;                                       \
    } while (0)

static int copy_string(char *out, unsigned int length, const char *value) {
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(value);
    if (n + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, n + 1);
    return NVML_SUCCESS;
}

/* ---- control API (tests) -------------------------------------------------- */

EXPORT unsigned long fake_nvml_state_size(void) { return sizeof(fake_state_t); }

/* Fill a state struct in place with `devices` default GPUs. */
EXPORT void fake_nvml_fill(fake_state_t *state, unsigned devices) { fill_defaults(state, devices); }

/* Create (or overwrite) a state file with `devices` default GPUs. */
EXPORT int fake_nvml_state_init(const char *path, unsigned devices) {
    fake_state_t *s = calloc(1, sizeof(fake_state_t));
    if (s == NULL)
        return ENOMEM;
    fill_defaults(s, devices);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        free(s);
        return errno;
    }
    const char *p = (const char *)s;
    size_t left = sizeof(fake_state_t);
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w <= 0) {
            int e = errno;
            close(fd);
            free(s);
            return e;
        }
        p += w;
        left -= (size_t)w;
    }
    close(fd);
    free(s);
    return 0;
}

/* Release every hung call (in every process using this state). */
EXPORT void fake_nvml_release_hangs(void) {
    if (S != NULL)
        __atomic_add_fetch(&S->faults.release_generation, 1, __ATOMIC_ACQ_REL);
}

struct layout_entry {
    const char *name;
    long value;
};

#define SZ(t) {#t, (long)sizeof(t)}
#define OF(t, f) {#t "." #f, (long)offsetof(t, f)}

static const struct layout_entry layout[] = {
    SZ(nvmlPciInfo_t), OF(nvmlPciInfo_t, busIdLegacy), OF(nvmlPciInfo_t, domain),
    OF(nvmlPciInfo_t, bus), OF(nvmlPciInfo_t, device), OF(nvmlPciInfo_t, pciDeviceId),
    OF(nvmlPciInfo_t, pciSubSystemId), OF(nvmlPciInfo_t, busId),
    SZ(nvmlUtilization_t), OF(nvmlUtilization_t, gpu), OF(nvmlUtilization_t, memory),
    SZ(nvmlMemory_t), OF(nvmlMemory_t, total), OF(nvmlMemory_t, free), OF(nvmlMemory_t, used),
    SZ(nvmlMemory_v2_t), OF(nvmlMemory_v2_t, version), OF(nvmlMemory_v2_t, total),
    OF(nvmlMemory_v2_t, reserved), OF(nvmlMemory_v2_t, free), OF(nvmlMemory_v2_t, used),
    SZ(nvmlTemperature_v1_t), OF(nvmlTemperature_v1_t, version),
    OF(nvmlTemperature_v1_t, sensorType), OF(nvmlTemperature_v1_t, temperature),
    SZ(nvmlProcessInfo_t), OF(nvmlProcessInfo_t, pid), OF(nvmlProcessInfo_t, usedGpuMemory),
    OF(nvmlProcessInfo_t, gpuInstanceId), OF(nvmlProcessInfo_t, computeInstanceId),
    SZ(nvmlProcessUtilizationSample_t), OF(nvmlProcessUtilizationSample_t, pid),
    OF(nvmlProcessUtilizationSample_t, timeStamp), OF(nvmlProcessUtilizationSample_t, smUtil),
    OF(nvmlProcessUtilizationSample_t, memUtil), OF(nvmlProcessUtilizationSample_t, encUtil),
    OF(nvmlProcessUtilizationSample_t, decUtil),
    SZ(nvmlFieldValue_t), OF(nvmlFieldValue_t, fieldId), OF(nvmlFieldValue_t, scopeId),
    OF(nvmlFieldValue_t, timestamp), OF(nvmlFieldValue_t, latencyUsec),
    OF(nvmlFieldValue_t, valueType), OF(nvmlFieldValue_t, nvmlReturn), OF(nvmlFieldValue_t, value),
    SZ(nvmlEventData_t), OF(nvmlEventData_t, device), OF(nvmlEventData_t, eventType),
    OF(nvmlEventData_t, eventData), OF(nvmlEventData_t, gpuInstanceId),
    OF(nvmlEventData_t, computeInstanceId),
    SZ(nvmlGpmMetric_t), OF(nvmlGpmMetric_t, metricId), OF(nvmlGpmMetric_t, nvmlReturn),
    OF(nvmlGpmMetric_t, value), OF(nvmlGpmMetric_t, metricInfo),
    SZ(nvmlGpmMetricsGet_t), OF(nvmlGpmMetricsGet_t, version), OF(nvmlGpmMetricsGet_t, numMetrics),
    OF(nvmlGpmMetricsGet_t, sample1), OF(nvmlGpmMetricsGet_t, sample2),
    OF(nvmlGpmMetricsGet_t, metrics),
    SZ(nvmlGpmSupport_t), OF(nvmlGpmSupport_t, version), OF(nvmlGpmSupport_t, isSupportedDevice),
    SZ(nvmlGpuFabricInfo_v3_t), OF(nvmlGpuFabricInfo_v3_t, version),
    OF(nvmlGpuFabricInfo_v3_t, clusterUuid), OF(nvmlGpuFabricInfo_v3_t, status),
    OF(nvmlGpuFabricInfo_v3_t, cliqueId), OF(nvmlGpuFabricInfo_v3_t, state),
    OF(nvmlGpuFabricInfo_v3_t, healthMask), OF(nvmlGpuFabricInfo_v3_t, healthSummary),
    SZ(nvmlMarginTemperature_v1_t), OF(nvmlMarginTemperature_v1_t, version),
    OF(nvmlMarginTemperature_v1_t, marginTemperature),
    /* the shared state, mirrored by tests/fakes/nvml/control.py */
    SZ(fr_rule_t), OF(fr_rule_t, active), OF(fr_rule_t, device), OF(fr_rule_t, arg),
    OF(fr_rule_t, error), OF(fr_rule_t, hang), OF(fr_rule_t, remaining),
    OF(fr_rule_t, after_calls), OF(fr_rule_t, matched), OF(fr_rule_t, delay_ms), OF(fr_rule_t, fn),
    SZ(fr_faults_t), OF(fr_faults_t, calls), OF(fr_faults_t, release_generation),
    OF(fr_faults_t, hangs_entered), OF(fr_faults_t, hung_now), OF(fr_faults_t, fr_pad),
    OF(fr_faults_t, rules),
    SZ(fake_proc_t), OF(fake_proc_t, pid), OF(fake_proc_t, gpu_instance),
    OF(fake_proc_t, compute_instance), OF(fake_proc_t, sm_util), OF(fake_proc_t, mem_util),
    OF(fake_proc_t, graphics), OF(fake_proc_t, used_memory), OF(fake_proc_t, enc_util),
    OF(fake_proc_t, dec_util), OF(fake_proc_t, name),
    SZ(fake_mig_t), OF(fake_mig_t, present), OF(fake_mig_t, gpu_instance),
    OF(fake_mig_t, compute_instance), OF(fake_mig_t, util_percent), OF(fake_mig_t, dram_percent),
    OF(fake_mig_t, pad), OF(fake_mig_t, memory_total), OF(fake_mig_t, memory_used),
    OF(fake_mig_t, uuid),
    SZ(fake_event_t), OF(fake_event_t, device), OF(fake_event_t, pad), OF(fake_event_t, type),
    OF(fake_event_t, data),
    SZ(fake_device_t), OF(fake_device_t, lost), OF(fake_device_t, ecc_enabled),
    OF(fake_device_t, name), OF(fake_device_t, uuid), OF(fake_device_t, serial),
    OF(fake_device_t, vbios), OF(fake_device_t, pci_domain), OF(fake_device_t, pci_bus),
    OF(fake_device_t, pci_device), OF(fake_device_t, pci_device_id),
    OF(fake_device_t, pci_subsystem_id), OF(fake_device_t, util_gpu),
    OF(fake_device_t, util_memory), OF(fake_device_t, util_encoder),
    OF(fake_device_t, util_decoder), OF(fake_device_t, pad_u), OF(fake_device_t, memory_total),
    OF(fake_device_t, memory_reserved), OF(fake_device_t, memory_used),
    OF(fake_device_t, temperature_gpu), OF(fake_device_t, temperature_memory),
    OF(fake_device_t, power_mw), OF(fake_device_t, power_limit_mw), OF(fake_device_t, energy_mj),
    OF(fake_device_t, energy_step_mj), OF(fake_device_t, clock_mhz),
    OF(fake_device_t, max_clock_mhz), OF(fake_device_t, fan_count),
    OF(fake_device_t, fan_percent), OF(fake_device_t, pstate), OF(fake_device_t, pcie_tx_kbs),
    OF(fake_device_t, pcie_rx_kbs), OF(fake_device_t, pcie_replays), OF(fake_device_t, pcie_gen),
    OF(fake_device_t, pcie_width), OF(fake_device_t, pcie_max_gen),
    OF(fake_device_t, pcie_max_width), OF(fake_device_t, pad0),
    OF(fake_device_t, clocks_event_reasons), OF(fake_device_t, violation_ns),
    OF(fake_device_t, ecc), OF(fake_device_t, retired_pages), OF(fake_device_t, retired_pending),
    OF(fake_device_t, remapped_corrected), OF(fake_device_t, remapped_uncorrected),
    OF(fake_device_t, remapped_pending), OF(fake_device_t, remapped_failure),
    OF(fake_device_t, nvlink_count), OF(fake_device_t, nvlink_active_mask),
    OF(fake_device_t, pad1), OF(fake_device_t, nvlink_tx_kib), OF(fake_device_t, nvlink_rx_kib),
    OF(fake_device_t, mig_mode), OF(fake_device_t, mig_pending), OF(fake_device_t, mig),
    OF(fake_device_t, proc_count), OF(fake_device_t, pad2), OF(fake_device_t, procs),
    OF(fake_device_t, calls), OF(fake_device_t, proc_sample_us), OF(fake_device_t, proc_last_seen),
    OF(fake_device_t, memory_temp_double), OF(fake_device_t, gpm_supported),
    OF(fake_device_t, recovery_action), OF(fake_device_t, gpm_value),
    OF(fake_device_t, gpm_status), OF(fake_device_t, nvlink_errors),
    OF(fake_device_t, fabric_state), OF(fake_device_t, fabric_status),
    OF(fake_device_t, fabric_health_mask), OF(fake_device_t, fabric_clique),
    OF(fake_device_t, margin_temperature), OF(fake_device_t, margin_supported),
    OF(fake_device_t, power_min_mw), OF(fake_device_t, power_max_mw),
    OF(fake_device_t, power_default_mw), OF(fake_device_t, sram_threshold_exceeded),
    OF(fake_device_t, field_count), OF(fake_device_t, field_pad), OF(fake_device_t, fields),
    OF(fake_device_t, fabric_cluster), OF(fake_device_t, platform_slot),
    OF(fake_device_t, platform_tray), OF(fake_device_t, platform_host),
    OF(fake_device_t, platform_module), OF(fake_device_t, platform_chassis),
    SZ(nvmlPlatformInfo_v2_t), OF(nvmlPlatformInfo_v2_t, version),
    OF(nvmlPlatformInfo_v2_t, ibGuid), OF(nvmlPlatformInfo_v2_t, chassisSerialNumber),
    OF(nvmlPlatformInfo_v2_t, slotNumber), OF(nvmlPlatformInfo_v2_t, trayIndex),
    OF(nvmlPlatformInfo_v2_t, hostId), OF(nvmlPlatformInfo_v2_t, peerType),
    OF(nvmlPlatformInfo_v2_t, moduleId),
    SZ(fake_field_t), OF(fake_field_t, field_id), OF(fake_field_t, scope_id),
    OF(fake_field_t, value_type), OF(fake_field_t, pad), OF(fake_field_t, raw),
    SZ(nvmlEccSramErrorStatus_v1_t),
    OF(nvmlEccSramErrorStatus_v1_t, version),
    OF(nvmlEccSramErrorStatus_v1_t, aggregateUncParity),
    OF(nvmlEccSramErrorStatus_v1_t, aggregateUncSecDed),
    OF(nvmlEccSramErrorStatus_v1_t, aggregateCor),
    OF(nvmlEccSramErrorStatus_v1_t, volatileUncParity),
    OF(nvmlEccSramErrorStatus_v1_t, volatileUncSecDed),
    OF(nvmlEccSramErrorStatus_v1_t, volatileCor),
    OF(nvmlEccSramErrorStatus_v1_t, aggregateUncBucketL2),
    OF(nvmlEccSramErrorStatus_v1_t, aggregateUncBucketSm),
    OF(nvmlEccSramErrorStatus_v1_t, aggregateUncBucketPcie),
    OF(nvmlEccSramErrorStatus_v1_t, aggregateUncBucketMcu),
    OF(nvmlEccSramErrorStatus_v1_t, aggregateUncBucketOther),
    OF(nvmlEccSramErrorStatus_v1_t, bThresholdExceeded),
    SZ(fake_state_t), OF(fake_state_t, magic), OF(fake_state_t, version),
    OF(fake_state_t, device_count), OF(fake_state_t, init_error),
    OF(fake_state_t, driver_version), OF(fake_state_t, cuda_driver_version),
    OF(fake_state_t, pad), OF(fake_state_t, faults), OF(fake_state_t, event_head),
    OF(fake_state_t, event_sets), OF(fake_state_t, events), OF(fake_state_t, devices),
    OF(fake_state_t, gpm_samples_live), OF(fake_state_t, gpm_sample_gets),
    OF(fake_state_t, gpm_metrics_gets),
};

/* "struct" -> sizeof, "struct.field" -> offsetof; -1 when unknown. */
EXPORT long fake_nvml_layout(const char *what) {
    for (size_t i = 0; i < sizeof layout / sizeof layout[0]; i++)
        if (strcmp(layout[i].name, what) == 0)
            return layout[i].value;
    return -1;
}

/* ---- init, system ---------------------------------------------------------- */

EXPORT int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    int rc = attach();
    if (rc == NVML_SUCCESS && S->init_error)
        rc = S->init_error;
    if (rc == NVML_SUCCESS) {
        init_count++;
        for (int i = 0; i < FAKE_MAX_DEVICES; i++) {
            gpu_handles[i].index = i;
            gpu_handles[i].mig = -1;
            for (int m = 0; m < FAKE_MAX_MIG; m++) {
                mig_handles[i][m].index = i;
                mig_handles[i][m].mig = m;
            }
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT int nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT int nvmlShutdown(void) {
    pthread_mutex_lock(&mu);
    int rc = init_count > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (init_count > 0)
        init_count--;
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT const char *nvmlErrorString(int result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    default: return "Unknown Error";
    }
}

EXPORT int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    int rc = guard(__func__, FAKE_NO_DEVICE, 0);
    return rc ? rc : copy_string(version, length, S->driver_version);
}

EXPORT int nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    int rc = guard(__func__, FAKE_NO_DEVICE, 0);
    return rc ? rc : copy_string(version, length, "13.580.82.07");
}

EXPORT int nvmlSystemGetCudaDriverVersion(int *version) {
    int rc = guard(__func__, FAKE_NO_DEVICE, 0);
    if (rc)
        return rc;
    *version = S->cuda_driver_version;
    return NVML_SUCCESS;
}

EXPORT int nvmlSystemGetCudaDriverVersion_v2(int *version) {
    int rc = guard(__func__, FAKE_NO_DEVICE, 0);
    if (rc)
        return rc;
    *version = S->cuda_driver_version;
    return NVML_SUCCESS;
}

/* ---- enumeration and identity --------------------------------------------- */

EXPORT int nvmlDeviceGetCount_v2(unsigned int *count) {
    int rc = guard(__func__, FAKE_NO_DEVICE, 0);
    if (rc)
        return rc;
    *count = S->device_count;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (S == NULL || init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= S->device_count || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    int rc = guard(__func__, (int)index, 1);
    if (rc)
        return rc;
    *device = &gpu_handles[index];
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *index) {
    ENTER(h);
    *index = (unsigned int)(d - S->devices);
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int length) {
    ENTER_MIG(h, mig);
    if (mig >= 0) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s MIG %ug.slice", d->name, d->mig[mig].gpu_instance);
        return copy_string(name, length, buf);
    }
    return copy_string(name, length, d->name);
}

EXPORT int nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int length) {
    ENTER_MIG(h, mig);
    return copy_string(uuid, length, mig >= 0 ? d->mig[mig].uuid : d->uuid);
}

EXPORT int nvmlDeviceGetSerial(nvmlDevice_t h, char *serial, unsigned int length) {
    ENTER(h);
    if (d->serial[0] == '\0')
        return NVML_ERROR_NOT_SUPPORTED;
    return copy_string(serial, length, d->serial);
}

EXPORT int nvmlDeviceGetVbiosVersion(nvmlDevice_t h, char *version, unsigned int length) {
    ENTER(h);
    return copy_string(version, length, d->vbios);
}

EXPORT int nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci) {
    ENTER(h);
    memset(pci, 0, sizeof(*pci));
    pci->domain = d->pci_domain;
    pci->bus = d->pci_bus;
    pci->device = d->pci_device;
    pci->pciDeviceId = d->pci_device_id;
    pci->pciSubSystemId = d->pci_subsystem_id;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", d->pci_domain & 0xFFFF,
             d->pci_bus & 0xFF, d->pci_device & 0x1F);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", d->pci_domain, d->pci_bus & 0xFF,
             d->pci_device & 0x1F);
    return NVML_SUCCESS;
}

/* ---- fast fields ---------------------------------------------------------- */

EXPORT int nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u) {
    ENTER(h);
    u->gpu = d->util_gpu;
    u->memory = d->util_memory;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetEncoderUtilization(nvmlDevice_t h, unsigned int *util, unsigned int *period) {
    ENTER(h);
    *util = d->util_encoder;
    *period = 167000;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetDecoderUtilization(nvmlDevice_t h, unsigned int *util, unsigned int *period) {
    ENTER(h);
    *util = d->util_decoder;
    *period = 167000;
    return NVML_SUCCESS;
}

static void memory_of(fake_device_t *d, int mig, unsigned long long *total,
                      unsigned long long *reserved, unsigned long long *used) {
    if (mig >= 0) {
        /* Memory belongs to the GPU instance: every compute instance of it reports
         * the instance's memory, held by its first present slot. */
        int first = mig;
        for (int m = 0; m < mig; m++) {
            if (d->mig[m].present && d->mig[m].gpu_instance == d->mig[mig].gpu_instance) {
                first = m;
                break;
            }
        }
        *total = d->mig[first].memory_total;
        *reserved = 0;
        *used = d->mig[first].memory_used;
    } else {
        *total = d->memory_total;
        *reserved = d->memory_reserved;
        *used = d->memory_used;
    }
}

EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
    ENTER_MIG(h, mig);
    unsigned long long total, reserved, used;
    memory_of(d, mig, &total, &reserved, &used);
    /* v1 counts the driver's reservation as used. */
    m->total = total;
    m->used = used + reserved;
    m->free = total - used - reserved;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m) {
    ENTER_MIG(h, mig);
    if (m->version != MEMORY_V2_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total, reserved, used;
    memory_of(d, mig, &total, &reserved, &used);
    m->total = total;
    m->reserved = reserved;
    m->used = used;
    m->free = total - used - reserved;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned int *temp) {
    ENTER(h);
    if (sensor != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = d->temperature_gpu;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetTemperatureV(nvmlDevice_t h, nvmlTemperature_v1_t *t) {
    ENTER(h);
    if (t->version != TEMPERATURE_V1_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (t->sensorType != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    t->temperature = (int)d->temperature_gpu;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned int *mw) {
    ENTER(h);
    *mw = d->power_mw;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned int *mw) {
    ENTER(h);
    *mw = d->power_limit_mw;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetPowerManagementLimit(nvmlDevice_t h, unsigned int *mw) {
    ENTER(h);
    *mw = d->power_limit_mw;
    return NVML_SUCCESS;
}

static unsigned long long read_energy(fake_device_t *d) {
    return __atomic_add_fetch(&d->energy_mj, d->energy_step_mj, __ATOMIC_ACQ_REL);
}

EXPORT int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t h, unsigned long long *mj) {
    ENTER(h);
    *mj = read_energy(d);
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned int *mhz) {
    ENTER(h);
    if (type < 0 || type > 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mhz = d->clock_mhz[type];
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetMaxClockInfo(nvmlDevice_t h, int type, unsigned int *mhz) {
    ENTER(h);
    if (type < 0 || type > 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mhz = d->max_clock_mhz[type];
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetNumFans(nvmlDevice_t h, unsigned int *count) {
    ENTER(h);
    if (d->fan_count == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = d->fan_count;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetFanSpeed_v2(nvmlDevice_t h, unsigned int fan, unsigned int *percent) {
    ENTER(h);
    if (d->fan_count == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (fan >= d->fan_count || fan >= FAKE_MAX_FANS)
        return NVML_ERROR_INVALID_ARGUMENT;
    *percent = d->fan_percent[fan];
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetFanSpeed(nvmlDevice_t h, unsigned int *percent) {
    ENTER(h);
    if (d->fan_count == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *percent = d->fan_percent[0];
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetPerformanceState(nvmlDevice_t h, int *pstate) {
    ENTER(h);
    *pstate = (int)d->pstate;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetPowerState(nvmlDevice_t h, int *pstate) {
    ENTER(h);
    *pstate = (int)d->pstate;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetPcieThroughput(nvmlDevice_t h, int counter, unsigned int *kbs) {
    ENTER(h);
    if (counter == 0)
        *kbs = d->pcie_tx_kbs;
    else if (counter == 1)
        *kbs = d->pcie_rx_kbs;
    else
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

#define UINT_GETTER(fn, field)                                  \
    EXPORT int fn(nvmlDevice_t h, unsigned int *out) {          \
        ENTER(h);                                               \
        *out = d->field;                                        \
        return NVML_SUCCESS;                                    \
    }

UINT_GETTER(nvmlDeviceGetPcieReplayCounter, pcie_replays)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, pcie_gen)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, pcie_width)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, pcie_max_gen)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, pcie_max_width)

EXPORT int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *reasons) {
    ENTER(h);
    *reasons = d->clocks_event_reasons;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h, unsigned long long *reasons) {
    ENTER(h);
    *reasons = d->clocks_event_reasons;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t h, unsigned long long *reasons) {
    ENTER(h);
    *reasons = 0x1FFull;
    return NVML_SUCCESS;
}

/* ---- field values --------------------------------------------------------- */

static int violation_slot(unsigned int field) {
    static const unsigned int ids[FAKE_VIOLATIONS] = {74, 75, 76, 77, 78, 79, 269, 270, 271};
    for (int i = 0; i < FAKE_VIOLATIONS; i++)
        if (ids[i] == field)
            return i;
    return -1;
}

/* The entry a test set for this field and scope (fake_field_t), if any: only the
 * member of its valueType is written, as a driver does. */
static int set_field_value(const fake_device_t *d, nvmlFieldValue_t *v) {
    static const size_t width[] = {sizeof(double), sizeof(unsigned int), sizeof(unsigned long),
                                   sizeof(unsigned long long), sizeof(signed long long),
                                   sizeof(signed int), sizeof(unsigned short)};
    for (uint32_t i = 0; i < d->field_count && i < FAKE_MAX_FIELDS; i++) {
        const fake_field_t *f = &d->fields[i];
        if (f->field_id != v->fieldId || f->scope_id != v->scopeId)
            continue;
        v->nvmlReturn = NVML_SUCCESS;
        v->valueType = f->value_type;
        /* little-endian: a member's bytes are the low bytes of the 64 */
        memcpy(&v->value, &f->raw, f->value_type < 7 ? width[f->value_type] : sizeof f->raw);
        return 1;
    }
    return 0;
}

static void field_value(fake_device_t *d, nvmlFieldValue_t *v) {
    if (set_field_value(d, v))
        return;
    v->nvmlReturn = NVML_SUCCESS;
    v->valueType = 3; /* unsigned long long */
    int slot = violation_slot(v->fieldId);
    if (slot >= 0) {
        v->value.ullVal = d->violation_ns[slot];
        return;
    }
    switch (v->fieldId) {
    case 82: /* NVML_FI_DEV_MEMORY_TEMP */
        if (d->memory_temp_double != 0) { /* a double entry; NaN compares != 0 too */
            v->valueType = 0;
            v->value.dVal = d->memory_temp_double;
            return;
        }
        if (d->temperature_memory == 0) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            return;
        }
        v->valueType = 1;
        v->value.uiVal = d->temperature_memory;
        return;
    case 83: /* NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION */
        v->value.ullVal = read_energy(d);
        return;
    case 91: /* NVML_FI_DEV_NVLINK_LINK_COUNT */
        v->valueType = 1;
        v->value.uiVal = d->nvlink_count;
        return;
    case 230: /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, an nvmlDeviceGpuRecoveryAction_t */
        v->valueType = 1;
        v->value.uiVal = d->recovery_action;
        return;
    case 94: /* NVML_FI_DEV_PCIE_REPLAY_COUNTER */
        v->valueType = 1;
        v->value.uiVal = d->pcie_replays;
        return;
    case 138: /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB */
    case 139: {
        const uint64_t *counter = v->fieldId == 138 ? d->nvlink_tx_kib : d->nvlink_rx_kib;
        if (d->nvlink_count == 0) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else if (v->scopeId == 0xFFFFFFFFu) {
            unsigned long long sum = 0;
            for (unsigned l = 0; l < d->nvlink_count && l < FAKE_MAX_NVLINKS; l++)
                sum += counter[l];
            v->value.ullVal = sum;
        } else if (v->scopeId >= d->nvlink_count || v->scopeId >= FAKE_MAX_NVLINKS) {
            v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            v->value.ullVal = counter[v->scopeId];
        }
        return;
    }
    default:
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
}

EXPORT int nvmlDeviceGetFieldValues(nvmlDevice_t h, int count, nvmlFieldValue_t *values) {
    ENTER(h);
    if (count < 0 || values == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    long long ts = (long long)now_us();
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = ts;
        v->latencyUsec = 0;
        /* A rule named "field:<id>" fails just that entry, as a real driver does. */
        char name[32];
        snprintf(name, sizeof name, "field:%u", v->fieldId);
        int rc = fr_apply(&S->faults, name, (int)(d - S->devices), FR_ANY, 0);
        if (rc) {
            v->nvmlReturn = (unsigned int)rc;
            continue;
        }
        field_value(d, v);
    }
    return NVML_SUCCESS;
}

/* ---- processes ------------------------------------------------------------ */

/* kind: the list a process is in (fake_proc_t.graphics): 0 compute, 1 graphics, 2 MPS clients. */
static int process_list(fake_device_t *d, unsigned kind, unsigned int *count, nvmlProcessInfo_t *infos) {
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    unsigned total = d->proc_count > FAKE_MAX_PROCS ? FAKE_MAX_PROCS : d->proc_count;
    for (unsigned i = 0; i < total; i++)
        if (d->procs[i].graphics == kind)
            n++;
    if (infos == NULL || *count < n) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    unsigned k = 0;
    for (unsigned i = 0; i < total; i++) {
        fake_proc_t *p = &d->procs[i];
        if (p->graphics != kind)
            continue;
        infos[k].pid = p->pid;
        infos[k].usedGpuMemory = p->used_memory;
        infos[k].gpuInstanceId = p->gpu_instance;
        infos[k].computeInstanceId = p->compute_instance;
        k++;
    }
    *count = k;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *count,
                                                   nvmlProcessInfo_t *infos) {
    ENTER(h);
    return process_list(d, 0, count, infos);
}

EXPORT int nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned int *count,
                                                    nvmlProcessInfo_t *infos) {
    ENTER(h);
    return process_list(d, 1, count, infos);
}

EXPORT int nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    ENTER(h);
    return process_list(d, 2, count, infos);
}

EXPORT int nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    ENTER(h);
    return process_list(d, 2, count, infos);
}

/* Drivers before R510: the same lists through _v2, with the same 24-byte struct. */
EXPORT int nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *count,
                                                   nvmlProcessInfo_t *infos) {
    ENTER(h);
    return process_list(d, 0, count, infos);
}

EXPORT int nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t h, unsigned int *count,
                                                    nvmlProcessInfo_t *infos) {
    ENTER(h);
    return process_list(d, 1, count, infos);
}

EXPORT int nvmlDeviceGetProcessUtilization(nvmlDevice_t h, nvmlProcessUtilizationSample_t *samples,
                                           unsigned int *count, unsigned long long lastSeen) {
    ENTER(h);
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    d->proc_last_seen = lastSeen;
    unsigned long long ts = d->proc_sample_us ? d->proc_sample_us : now_us();
    unsigned n = d->proc_count > FAKE_MAX_PROCS ? FAKE_MAX_PROCS : d->proc_count;
    /* No process, nothing to report: the size query succeeds with a count of 0. */
    if (n == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    /* The driver keeps samples only for newer-than-lastSeen windows. */
    if (lastSeen >= ts)
        return NVML_ERROR_NOT_FOUND;
    if (samples == NULL || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        samples[i].pid = d->procs[i].pid;
        samples[i].timeStamp = ts;
        samples[i].smUtil = d->procs[i].sm_util;
        samples[i].memUtil = d->procs[i].mem_util;
        samples[i].encUtil = d->procs[i].enc_util;
        samples[i].decUtil = d->procs[i].dec_util;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT int nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    int rc = guard(__func__, FAKE_NO_DEVICE, 0);
    if (rc)
        return rc;
    for (unsigned dev = 0; dev < S->device_count; dev++) {
        fake_device_t *d = &S->devices[dev];
        for (unsigned i = 0; i < d->proc_count && i < FAKE_MAX_PROCS; i++) {
            if (d->procs[i].pid == pid && d->procs[i].name[0] != '\0') {
                char buf[FAKE_PROC_NAME + 1];
                memcpy(buf, d->procs[i].name, FAKE_PROC_NAME);
                buf[FAKE_PROC_NAME] = '\0';
                return copy_string(name, length, buf);
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ---- slow fields ------------------------------------------------------------ */

EXPORT int nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t h, unsigned int *min,
                                                        unsigned int *max) {
    ENTER(h);
    if (d->power_max_mw == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *min = d->power_min_mw;
    *max = d->power_max_mw;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t h, unsigned int *mw) {
    ENTER(h);
    if (d->power_default_mw == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *mw = d->power_default_mw;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetMarginTemperature(nvmlDevice_t h, nvmlMarginTemperature_v1_t *m) {
    ENTER(h);
    if (m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != MARGIN_TEMPERATURE_V1_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!d->margin_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    m->marginTemperature = d->margin_temperature;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t h, nvmlEccSramErrorStatus_v1_t *st) {
    ENTER(h);
    if (st == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (st->version != SRAM_ECC_STATUS_V1_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (d->sram_threshold_exceeded > 1)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned int version = st->version;
    memset(st, 0, sizeof(*st));
    st->version = version;
    st->aggregateUncSecDed = d->ecc[1][1];
    st->bThresholdExceeded = d->sram_threshold_exceeded;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t h, unsigned int link, int counter,
                                           unsigned long long *value) {
    ENTER(h);
    if (d->nvlink_count == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= d->nvlink_count || link >= FAKE_MAX_NVLINKS || value == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* nvmlNvLinkErrorCounter_t: DL_REPLAY 0, DL_RECOVERY 1, DL_CRC_FLIT 2, DL_CRC_DATA 3;
     * DL_ECC_DATA (4) is not counted on these links. */
    if (counter == 4)
        return NVML_ERROR_NOT_SUPPORTED;
    if (counter < 0 || counter > 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    *value = d->nvlink_errors[link][counter];
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t h, nvmlGpuFabricInfo_v3_t *info) {
    ENTER(h);
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != FABRIC_INFO_V3_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (d->fabric_state == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(info->clusterUuid, (int)d->fabric_cluster, sizeof info->clusterUuid);
    info->status = d->fabric_status;
    info->cliqueId = d->fabric_clique;
    info->state = d->fabric_state;
    info->healthMask = d->fabric_health_mask;
    info->healthSummary = 0;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetPlatformInfo(nvmlDevice_t h, nvmlPlatformInfo_v2_t *info) {
    ENTER(h);
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != PLATFORM_INFO_V2_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (d->platform_chassis[0] == '\0')
        return NVML_ERROR_NOT_SUPPORTED;
    memset(info->ibGuid, 0, sizeof info->ibGuid);
    /* 16 bytes, NUL-padded and not NUL-terminated when full, as NVML's. */
    strncpy((char *)info->chassisSerialNumber, d->platform_chassis, sizeof info->chassisSerialNumber);
    info->slotNumber = (unsigned char)d->platform_slot;
    info->trayIndex = (unsigned char)d->platform_tray;
    info->hostId = (unsigned char)d->platform_host;
    info->peerType = 0;
    info->moduleId = (unsigned char)d->platform_module;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int type, int counter, unsigned long long *count) {
    ENTER(h);
    if (!d->ecc_enabled)
        return NVML_ERROR_NOT_SUPPORTED;
    if (type < 0 || type > 1 || counter < 0 || counter > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = d->ecc[type][counter];
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetRetiredPages(nvmlDevice_t h, int cause, unsigned int *count,
                                     unsigned long long *addresses) {
    ENTER(h);
    if (cause < 0 || cause > 1 || count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = d->retired_pages[cause];
    if (addresses == NULL || *count < n) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (unsigned i = 0; i < n; i++)
        addresses[i] = 0x100000ull * (i + 1) + (unsigned long long)cause;
    *count = n;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t h, int *pending) {
    ENTER(h);
    *pending = d->retired_pending ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetRemappedRows(nvmlDevice_t h, unsigned int *corr, unsigned int *unc,
                                     unsigned int *pending, unsigned int *failure) {
    ENTER(h);
    *corr = d->remapped_corrected;
    *unc = d->remapped_uncorrected;
    *pending = d->remapped_pending;
    *failure = d->remapped_failure;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetNvLinkState(nvmlDevice_t h, unsigned int link, unsigned int *active) {
    ENTER(h);
    if (d->nvlink_count == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= d->nvlink_count || link >= FAKE_MAX_NVLINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    *active = (d->nvlink_active_mask >> link) & 1u;
    return NVML_SUCCESS;
}

/* ---- MIG ---------------------------------------------------------------------- */

EXPORT int nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current, unsigned int *pending) {
    ENTER(h);
    *current = d->mig_mode;
    *pending = d->mig_pending;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned int *count) {
    ENTER(h);
    *count = d->mig_mode ? FAKE_MAX_MIG : 0;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int index, nvmlDevice_t *mig) {
    ENTER(h);
    if (!d->mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= FAKE_MAX_MIG || mig == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->mig[index].present)
        return NVML_ERROR_NOT_FOUND;
    *mig = &mig_handles[d - S->devices][index];
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceIsMigDeviceHandle(nvmlDevice_t h, unsigned int *isMig) {
    ENTER_MIG(h, mig);
    (void)d;
    *isMig = mig >= 0;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned int *id) {
    ENTER_MIG(h, mig);
    if (mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = d->mig[mig].gpu_instance;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetComputeInstanceId(nvmlDevice_t h, unsigned int *id) {
    ENTER_MIG(h, mig);
    if (mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = d->mig[mig].compute_instance;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t h, nvmlDevice_t *parent) {
    ENTER_MIG(h, mig);
    if (mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *parent = &gpu_handles[d - S->devices];
    return NVML_SUCCESS;
}

/* ---- GPM (per GPU-instance utilization on MIG) -------------------------------- */

EXPORT int nvmlGpmQueryDeviceSupport(nvmlDevice_t h, nvmlGpmSupport_t *support) {
    ENTER(h);
    if (support->version != 1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = d->gpm_supported ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    int rc = guard(__func__, FAKE_NO_DEVICE, 0);
    if (rc)
        return rc;
    *sample = calloc(1, sizeof(struct fake_gpm_sample));
    if (*sample == NULL)
        return NVML_ERROR_UNKNOWN;
    __atomic_add_fetch(&S->gpm_samples_live, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (sample == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    free(sample);
    if (S != NULL)
        __atomic_sub_fetch(&S->gpm_samples_live, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

/* A sample of the whole GPU: the values of every metric id now (pre-Hopper:
 * NOT_SUPPORTED; under MIG the GPU is sampled per GPU instance instead). */
EXPORT int nvmlGpmSampleGet(nvmlDevice_t h, nvmlGpmSample_t sample) {
    ENTER(h);
    if (sample == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->gpm_supported || d->mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;
    sample->valid = 1;
    sample->device = (int)(d - S->devices);
    sample->gpu_instance = GPM_FULL_GPU;
    sample->taken_us = now_us();
    sample->sequence = __atomic_add_fetch(&gpm_sequence, 1, __ATOMIC_ACQ_REL);
    memcpy(sample->values, d->gpm_value, sizeof sample->values);
    __atomic_add_fetch(&S->gpm_sample_gets, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmMigSampleGet(nvmlDevice_t h, unsigned int gpuInstanceId, nvmlGpmSample_t sample) {
    ENTER(h);
    if (sample == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->gpm_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    for (int m = 0; m < FAKE_MAX_MIG; m++) {
        fake_mig_t *g = &d->mig[m];
        if (d->mig_mode && g->present && g->gpu_instance == gpuInstanceId) {
            sample->valid = 1;
            sample->device = (int)(d - S->devices);
            sample->gpu_instance = gpuInstanceId;
            sample->taken_us = now_us();
            sample->sequence = __atomic_add_fetch(&gpm_sequence, 1, __ATOMIC_ACQ_REL);
            sample->util = g->util_percent;
            sample->sm = g->util_percent;
            sample->dram = g->dram_percent;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT int nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    int rc = guard(__func__, FAKE_NO_DEVICE, 0);
    if (rc)
        return rc;
    if (m->version != 1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    __atomic_add_fetch(&S->gpm_metrics_gets, 1, __ATOMIC_ACQ_REL);
    if (m->numMetrics > NVML_GPM_METRIC_MAX || m->sample1 == NULL || m->sample2 == NULL ||
        !m->sample1->valid || !m->sample2->valid)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* Two samples of the same GPU (or GPU instance), the first taken first. */
    if (m->sample1->device != m->sample2->device ||
        m->sample1->gpu_instance != m->sample2->gpu_instance ||
        m->sample1->sequence >= m->sample2->sequence)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m->sample2->gpu_instance == GPM_FULL_GPU) {
        fake_device_t *d = &S->devices[m->sample2->device];
        if (d->lost)
            return NVML_ERROR_GPU_IS_LOST;
        for (unsigned i = 0; i < m->numMetrics; i++) {
            nvmlGpmMetric_t *metric = &m->metrics[i];
            unsigned int id = metric->metricId;
            unsigned int status = id < FAKE_GPM_IDS ? d->gpm_status[id] : 0;
            if (status == 0 && (id >= FAKE_GPM_IDS || !gpm_known(id)))
                status = NVML_ERROR_NOT_SUPPORTED;
            metric->nvmlReturn = status;
            metric->value = status ? 0.0 : m->sample2->values[id];
            metric->metricInfo.shortName = NULL;
            metric->metricInfo.longName = NULL;
            metric->metricInfo.unit = NULL;
        }
        return NVML_SUCCESS;
    }
    for (unsigned i = 0; i < m->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &m->metrics[i];
        metric->nvmlReturn = NVML_SUCCESS;
        switch (metric->metricId) {
        case 1: metric->value = m->sample2->util; break; /* GRAPHICS_UTIL */
        case 2: metric->value = m->sample2->sm; break;   /* SM_UTIL */
        case 10: metric->value = m->sample2->dram; break; /* DRAM_BW_UTIL */
        default: metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ---- events ------------------------------------------------------------------- */

EXPORT int nvmlEventSetCreate(nvmlEventSet_t *set) {
    int rc = guard(__func__, FAKE_NO_DEVICE, 0);
    if (rc)
        return rc;
    struct fake_event_set *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NVML_ERROR_UNKNOWN;
    s->cursor = __atomic_load_n(&S->event_head, __ATOMIC_ACQUIRE);
    __atomic_add_fetch(&S->event_sets, 1, __ATOMIC_ACQ_REL);
    *set = s;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetSupportedEventTypes(nvmlDevice_t h, unsigned long long *types) {
    ENTER(h);
    *types = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceRegisterEvents(nvmlDevice_t h, unsigned long long types, nvmlEventSet_t set) {
    ENTER(h);
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~SUPPORTED_EVENTS)
        return NVML_ERROR_NOT_SUPPORTED;
    set->types[d - S->devices] |= types;
    return NVML_SUCCESS;
}

static int next_event(struct fake_event_set *set, nvmlEventData_t *data) {
    uint64_t head = __atomic_load_n(&S->event_head, __ATOMIC_ACQUIRE);
    if (head - set->cursor > FAKE_MAX_EVENTS)
        set->cursor = head - FAKE_MAX_EVENTS; /* the ring overflowed: the oldest are gone */
    while (set->cursor < head) {
        fake_event_t *e = &S->events[set->cursor % FAKE_MAX_EVENTS];
        set->cursor++;
        if (e->device < S->device_count && (set->types[e->device] & e->type)) {
            data->device = &gpu_handles[e->device];
            data->eventType = e->type;
            data->eventData = e->data;
            data->gpuInstanceId = 0xFFFFFFFFu;
            data->computeInstanceId = 0xFFFFFFFFu;
            return 1;
        }
    }
    return 0;
}

EXPORT int nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    int rc = guard(__func__, FAKE_NO_DEVICE, 0);
    if (rc)
        return rc;
    if (set == NULL || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long deadline = now_us() + 1000ull * timeoutms;
    for (;;) {
        if (next_event(set, data))
            return NVML_SUCCESS;
        if (now_us() >= deadline)
            return NVML_ERROR_TIMEOUT;
        /* The real call blocks in the driver at no CPU cost; a 50 ms nap keeps
           this poll's wake-ups (20 a second) out of the worker's CPU in
           bench/idle.py, at an event latency tests never notice. */
        struct timespec pause = {0, 50 * 1000000L};
        nanosleep(&pause, NULL);
    }
}

EXPORT int nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

EXPORT int nvmlEventSetFree(nvmlEventSet_t set) {
    free(set);
    return NVML_SUCCESS;
}
