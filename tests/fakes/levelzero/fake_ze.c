/* A fake Level Zero loader (libze_loader.so.1) serving the Sysman entry points the
 * levelzero backend calls, for tests driven through the real pyzes package.
 *
 * The public structs below are written from the Level Zero spec (zes_api.h v1.17) with
 * the x86_64 sizes asserted; the devices live in a file named by $FAKE_ZE_STATE
 * (ze_fake_state.h) that the test maps too, so values, faults and hangs change while a
 * daemon runs. Counters advance by their step on every call, so a rate is exact.
 * Without $FAKE_ZE_STATE zesInit fails as a loader without drivers does. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ze_fake_state.h"

#define EXPORT __attribute__((visibility("default")))

typedef int32_t ze_result_t;
typedef uint8_t ze_bool_t;
#define OK 0
#define DEVICE_LOST 0x70000001
#define UNINITIALIZED 0x78000001
#define INVALID_NULL_POINTER 0x78000007
#define INVALID_NULL_HANDLE 0x78000005

typedef struct { int32_t stype; void *pNext; uint32_t type, vendorId, deviceId, flags,
    subdeviceId, coreClockRate; uint64_t maxMemAllocSize; uint32_t maxHardwareContexts,
    maxCommandQueuePriority, numThreadsPerEU, physicalEUSimdWidth, numEUsPerSubslice,
    numSubslicesPerSlice, numSlices; uint64_t timerResolution; uint32_t timestampValidBits,
    kernelTimestampValidBits; uint8_t uuid[16]; char name[256]; } ze_device_properties_t;
typedef struct { int32_t stype; void *pNext; ze_device_properties_t core; uint32_t numSubdevices;
    char serialNumber[64], boardNumber[64], brandName[64], modelName[64], vendorName[64],
    driverVersion[64]; } zes_device_properties_t;
typedef struct { uint32_t domain, bus, device, function; } zes_pci_address_t;
typedef struct { int32_t gen, width; int64_t maxBandwidth; } zes_pci_speed_t;
typedef struct { int32_t stype; void *pNext; zes_pci_address_t address; zes_pci_speed_t maxSpeed;
    ze_bool_t haveBandwidthCounters, havePacketCounters, haveReplayCounters; } zes_pci_properties_t;
typedef struct { int32_t stype; void *pNext; int32_t status; uint32_t qualityIssues,
    stabilityIssues; zes_pci_speed_t speed; } zes_pci_state_t;
typedef struct { uint64_t timestamp, replayCounter, packetCounter, rxCounter, txCounter;
    zes_pci_speed_t speed; } zes_pci_stats_t;
typedef struct { int32_t stype; void *pNext; int32_t currentState, pendingState, pendingAction; }
    zes_device_ecc_properties_t;
typedef struct { int32_t stype; void *pNext; uint32_t reset; int32_t repaired; } zes_device_state_t;
typedef struct { int32_t stype; void *pNext; int32_t type; ze_bool_t onSubdevice; uint32_t subdeviceId;
    int32_t location; uint64_t physicalSize; int32_t busWidth, numChannels; } zes_mem_properties_t;
typedef struct { int32_t stype; void *pNext; int32_t health; uint64_t free, size; } zes_mem_state_t;
typedef struct { uint64_t readCounter, writeCounter, maxBandwidth, timestamp; } zes_mem_bandwidth_t;
typedef struct { int32_t stype; void *pNext; ze_bool_t onSubdevice; uint32_t subdeviceId;
    ze_bool_t canControl, isEnergyThresholdSupported; int32_t defaultLimit, minLimit, maxLimit; }
    zes_power_properties_t;
typedef struct { uint64_t energy, timestamp; } zes_power_energy_counter_t;
typedef struct { int32_t stype; void *pNext; int32_t type; ze_bool_t onSubdevice; uint32_t subdeviceId;
    ze_bool_t canControl, isThrottleEventSupported; double min, max; } zes_freq_properties_t;
typedef struct { int32_t stype; void *pNext; double currentVoltage, request, tdp, efficient, actual;
    uint32_t throttleReasons; } zes_freq_state_t;
typedef struct { int32_t stype; void *pNext; int32_t type; ze_bool_t onSubdevice; uint32_t subdeviceId;
    double maxTemperature; ze_bool_t isCriticalTempSupported, isThreshold1Supported,
    isThreshold2Supported; } zes_temp_properties_t;
typedef struct { int32_t stype; void *pNext; int32_t type; ze_bool_t onSubdevice; uint32_t subdeviceId; }
    zes_engine_properties_t;
typedef struct { uint64_t activeTime, timestamp; } zes_engine_stats_t;
typedef struct { int32_t stype; void *pNext; int32_t type; ze_bool_t onSubdevice; uint32_t subdeviceId; }
    zes_ras_properties_t;
typedef struct { int32_t stype; void *pNext; uint64_t category[7]; } zes_ras_state_t;
typedef struct { int32_t category; uint64_t errorCounter; } zes_ras_state_exp_t;
typedef struct { uint32_t fabricId, attachId; uint8_t portNumber; } zes_fabric_port_id_t;
typedef struct { int64_t bitRate; int32_t width; } zes_fabric_port_speed_t;
typedef struct { int32_t stype; void *pNext; char model[256]; ze_bool_t onSubdevice; uint32_t subdeviceId;
    zes_fabric_port_id_t portId; zes_fabric_port_speed_t maxRxSpeed, maxTxSpeed; }
    zes_fabric_port_properties_t;
typedef struct { int32_t stype; void *pNext; int32_t status; uint32_t qualityIssues, failureReasons;
    zes_fabric_port_id_t remotePortId; zes_fabric_port_speed_t rxSpeed, txSpeed; }
    zes_fabric_port_state_t;
typedef struct { uint64_t timestamp, rxCounter, txCounter; } zes_fabric_port_throughput_t;

_Static_assert(sizeof(ze_device_properties_t) == 368, "ze_device_properties_t");
_Static_assert(offsetof(ze_device_properties_t, uuid) == 96, "uuid");
_Static_assert(sizeof(zes_device_properties_t) == 776, "zes_device_properties_t");
_Static_assert(offsetof(zes_device_properties_t, modelName) == 580, "modelName");
_Static_assert(offsetof(zes_device_properties_t, driverVersion) == 708, "driverVersion");
_Static_assert(sizeof(zes_pci_properties_t) == 56, "zes_pci_properties_t");
_Static_assert(sizeof(zes_pci_state_t) == 48, "zes_pci_state_t");
_Static_assert(sizeof(zes_pci_stats_t) == 56, "zes_pci_stats_t");
_Static_assert(sizeof(zes_device_state_t) == 24, "zes_device_state_t");
_Static_assert(sizeof(zes_mem_properties_t) == 48, "zes_mem_properties_t");
_Static_assert(sizeof(zes_mem_state_t) == 40, "zes_mem_state_t");
_Static_assert(sizeof(zes_power_properties_t) == 40, "zes_power_properties_t");
_Static_assert(sizeof(zes_freq_properties_t) == 48, "zes_freq_properties_t");
_Static_assert(sizeof(zes_freq_state_t) == 64, "zes_freq_state_t");
_Static_assert(sizeof(zes_temp_properties_t) == 48, "zes_temp_properties_t");
_Static_assert(sizeof(zes_engine_properties_t) == 32, "zes_engine_properties_t");
_Static_assert(sizeof(zes_ras_properties_t) == 32, "zes_ras_properties_t");
_Static_assert(sizeof(zes_ras_state_t) == 72, "zes_ras_state_t");
_Static_assert(sizeof(zes_ras_state_exp_t) == 16, "zes_ras_state_exp_t");
_Static_assert(sizeof(zes_fabric_port_properties_t) == 328, "zes_fabric_port_properties_t");
_Static_assert(offsetof(zes_fabric_port_properties_t, maxRxSpeed) == 296, "maxRxSpeed");
_Static_assert(sizeof(zes_fabric_port_state_t) == 72, "zes_fabric_port_state_t");
_Static_assert(sizeof(zes_fabric_port_throughput_t) == 24, "zes_fabric_port_throughput_t");

enum { K_ENGINE, K_MEM, K_POWER, K_FREQ, K_TEMP, K_RAS, K_PORT, KINDS };
#define MAX_COMP 32
typedef struct { int dev, tile, type; } comp_t;   /* what a component handle points at */

static zf_state_t *S;
static int driver_handle;
static int device_handles[ZF_MAX_DEV];
static comp_t comps[ZF_MAX_DEV][KINDS][MAX_COMP];
static uint32_t ncomps[ZF_MAX_DEV][KINDS];

static int dev_of(const void *h) {
    const int *p = (const int *)h;
    if (p < device_handles || p >= device_handles + ZF_MAX_DEV) return -1;
    return (int)(p - device_handles);
}

/* Every call: count it, apply the test's rules (../fault_rules.h), then DEVICE_LOST for
 * a lost device. */
static ze_result_t guard(const char *fn, int dev) {
    if (!S) return UNINITIALIZED;
    fr_count(&S->faults);
    if (S->chatty) { printf("fake ze: %s device %d\n", fn, dev); fflush(stdout); }
    ze_result_t rc = fr_apply(&S->faults, fn, dev, FR_ANY, 1);
    if (rc) return rc;
    if (dev >= 0 && S->dev[dev].lost) return DEVICE_LOST;
    return OK;
}

#define GUARD(dev) do { ze_result_t rc_ = guard(__func__, (dev)); if (rc_) return rc_; } while (0)
#define COMP(h) ((const comp_t *)(h))
#define D(c) (&S->dev[(c)->dev])

static void build_components(void) {
    memset(ncomps, 0, sizeof ncomps);
    for (int d = 0; d < S->devices && d < ZF_MAX_DEV; d++) {
        zf_device_t *v = &S->dev[d];
        int tiles = v->tiles > 1 ? ZF_TILES : 1;
#define ADD(kind, t, ty) do { if (ncomps[d][kind] < MAX_COMP) { \
        comps[d][kind][ncomps[d][kind]++] = (comp_t){d, (t), (ty)}; } } while (0)
        for (int t = 0; t < tiles; t++) {
            for (int e = 0; e < ZF_ENGINE_TYPES; e++)
                if (v->engine_mask & (1 << e)) ADD(K_ENGINE, t, e);
            ADD(K_MEM, t, 0);
        }
        for (int p = 0; p < v->power_domains && p < 1; p++) ADD(K_POWER, -1, p);
        for (int f = 0; f < ZF_FREQ_DOMAINS; f++) if (v->freq_mask & (1 << f)) ADD(K_FREQ, -1, f);
        for (int s = 0; s < ZF_TEMP_TYPES; s++) {
            if (!(v->temp_mask & (1 << s))) continue;
            if (v->temp_per_tile && tiles > 1) for (int t = 0; t < tiles; t++) ADD(K_TEMP, t, s);
            else ADD(K_TEMP, -1, s);
        }
        for (int r = 0; r < v->ras_sets && r < 2; r++) ADD(K_RAS, -1, r);
        for (int p = 0; p < v->fabric_ports && p < ZF_PORTS; p++) ADD(K_PORT, -1, p);
#undef ADD
    }
}

static ze_result_t enumerate(int dev, int kind, uint32_t *pCount, void **out) {
    if (!pCount) return INVALID_NULL_POINTER;
    uint32_t n = ncomps[dev][kind];
    if (*pCount == 0 || !out) { *pCount = n; return OK; }
    if (*pCount > n) *pCount = n;
    for (uint32_t i = 0; i < *pCount; i++) out[i] = &comps[dev][kind][i];
    return OK;
}

static char state_path[FR_PATH_LEN];

/* Maps $FAKE_ZE_STATE; a later zesInit with another path (the next in-process test)
 * maps that one instead. */
EXPORT ze_result_t zesInit(uint32_t flags) {
    (void)flags;
    void *state = S;
    int mapped = fr_follow_env("FAKE_ZE_STATE", sizeof(zf_state_t), ZF_MAGIC, &state, state_path);
    if (!mapped) return UNINITIALIZED;  /* no driver behind the loader */
    S = state;
    if (mapped == 1) return S->init_rc;
    build_components();
    if (S->chatty) { printf("fake ze: zesInit\n"); fflush(stdout); }
    return S->init_rc;
}

EXPORT ze_result_t zesDriverGet(uint32_t *pCount, void **phDrivers) {
    GUARD(-1);
    if (!pCount) return INVALID_NULL_POINTER;
    if (*pCount == 0 || !phDrivers) { *pCount = 1; return OK; }
    *pCount = 1;
    phDrivers[0] = &driver_handle;
    return OK;
}

EXPORT ze_result_t zesDeviceGet(void *hDriver, uint32_t *pCount, void **phDevices) {
    GUARD(-1);
    if (hDriver != &driver_handle) return INVALID_NULL_HANDLE;
    if (!pCount) return INVALID_NULL_POINTER;
    uint32_t n = (uint32_t)(S->devices < ZF_MAX_DEV ? S->devices : ZF_MAX_DEV);
    if (*pCount == 0 || !phDevices) { *pCount = n; return OK; }
    if (*pCount > n) *pCount = n;
    for (uint32_t i = 0; i < *pCount; i++) phDevices[i] = &device_handles[i];
    return OK;
}

#define DEVICE_CALL(h) int d_ = dev_of(h); if (d_ < 0) return INVALID_NULL_HANDLE; GUARD(d_); \
    zf_device_t *v = &S->dev[d_]

EXPORT ze_result_t zesDeviceGetProperties(void *h, zes_device_properties_t *p) {
    DEVICE_CALL(h);
    memset(&p->core, 0, sizeof p->core);
    p->core.type = (uint32_t)v->type;
    p->core.vendorId = (uint32_t)v->vendor_id;
    p->core.deviceId = (uint32_t)v->device_id;
    memcpy(p->core.uuid, v->uuid, 16);
    memcpy(p->core.name, v->name, sizeof p->core.name);
    p->numSubdevices = (uint32_t)(v->tiles > 1 ? v->tiles : 0);
    memcpy(p->serialNumber, v->serial, 64);
    strcpy(p->boardNumber, "unknown");
    strcpy(p->brandName, "Intel(R) Corporation");
    memcpy(p->modelName, v->model, 64);
    strcpy(p->vendorName, "Intel(R) Corporation");
    memcpy(p->driverVersion, v->driver, 64);
    return OK;
}

EXPORT ze_result_t zesDeviceGetState(void *h, zes_device_state_t *p) {
    DEVICE_CALL(h);
    p->reset = v->reset_flags;
    p->repaired = 0;
    return OK;
}

EXPORT ze_result_t zesDevicePciGetProperties(void *h, zes_pci_properties_t *p) {
    DEVICE_CALL(h);
    p->address = (zes_pci_address_t){(uint32_t)v->pci_domain, (uint32_t)v->pci_bus,
                                     (uint32_t)v->pci_dev, (uint32_t)v->pci_fn};
    p->maxSpeed = (zes_pci_speed_t){v->pci_max_gen, v->pci_max_width, v->pci_max_bandwidth};
    p->haveBandwidthCounters = (ze_bool_t)v->have_bandwidth;
    p->havePacketCounters = 0;
    p->haveReplayCounters = (ze_bool_t)v->have_replay;
    return OK;
}

EXPORT ze_result_t zesDevicePciGetState(void *h, zes_pci_state_t *p) {
    DEVICE_CALL(h);
    p->status = 1;
    p->qualityIssues = p->stabilityIssues = 0;
    p->speed = (zes_pci_speed_t){v->pci_gen, v->pci_width, -1};
    return OK;
}

EXPORT ze_result_t zesDevicePciGetStats(void *h, zes_pci_stats_t *p) {
    DEVICE_CALL(h);
    if (v->have_bandwidth) { v->pci_rx += v->pci_rx_step; v->pci_tx += v->pci_tx_step; }
    v->pci_ts += v->pci_ts_step;
    p->timestamp = v->pci_ts;
    p->replayCounter = v->have_replay ? v->pci_replay : 0;
    p->packetCounter = 0;
    p->rxCounter = v->have_bandwidth ? v->pci_rx : 0;
    p->txCounter = v->have_bandwidth ? v->pci_tx : 0;
    p->speed = (zes_pci_speed_t){v->pci_gen, v->pci_width, -1};
    return OK;
}

EXPORT ze_result_t zesDeviceEccAvailable(void *h, ze_bool_t *p) {
    DEVICE_CALL(h);
    *p = v->ecc_state != 0;
    return OK;
}

EXPORT ze_result_t zesDeviceGetEccState(void *h, zes_device_ecc_properties_t *p) {
    DEVICE_CALL(h);
    p->currentState = p->pendingState = v->ecc_state;
    p->pendingAction = 0;
    return OK;
}

#define ENUM_CALL(name, kind) \
    EXPORT ze_result_t name(void *h, uint32_t *pCount, void **out) { \
        int d_ = dev_of(h); if (d_ < 0) return INVALID_NULL_HANDLE; GUARD(d_); \
        return enumerate(d_, kind, pCount, out); }
ENUM_CALL(zesDeviceEnumMemoryModules, K_MEM)
ENUM_CALL(zesDeviceEnumPowerDomains, K_POWER)
ENUM_CALL(zesDeviceEnumFrequencyDomains, K_FREQ)
ENUM_CALL(zesDeviceEnumTemperatureSensors, K_TEMP)
ENUM_CALL(zesDeviceEnumEngineGroups, K_ENGINE)
ENUM_CALL(zesDeviceEnumRasErrorSets, K_RAS)
ENUM_CALL(zesDeviceEnumFabricPorts, K_PORT)

#define COMP_CALL(h) const comp_t *c = COMP(h); if (!c) return INVALID_NULL_HANDLE; GUARD(c->dev); \
    zf_device_t *v = D(c)

EXPORT ze_result_t zesMemoryGetProperties(void *h, zes_mem_properties_t *p) {
    COMP_CALL(h);
    p->type = 13;  /* HBM */
    p->onSubdevice = v->tiles > 1;
    p->subdeviceId = (uint32_t)(c->tile < 0 ? 0 : c->tile);
    p->location = 1;  /* ZES_MEM_LOC_DEVICE */
    p->physicalSize = v->mem_size[c->tile];
    p->busWidth = p->numChannels = -1;
    return OK;
}

EXPORT ze_result_t zesMemoryGetState(void *h, zes_mem_state_t *p) {
    COMP_CALL(h);
    p->health = v->mem_health;
    p->free = v->mem_free[c->tile];
    p->size = v->mem_size[c->tile];
    return OK;
}

/* Left out of a build with -DZF_OLD_LOADER: a loader older than the pyzes binding. */
#ifndef ZF_OLD_LOADER
EXPORT ze_result_t zesMemoryGetBandwidth(void *h, zes_mem_bandwidth_t *p) {
    COMP_CALL(h);
    if (c->tile == 0) { v->mem_read += v->mem_read_step; v->mem_write += v->mem_write_step; }
    v->mem_ts += 1000000;
    /* Tile 0 carries the counters; other tiles report none. */
    p->readCounter = c->tile == 0 ? v->mem_read : 0;
    p->writeCounter = c->tile == 0 ? v->mem_write : 0;
    p->maxBandwidth = v->mem_bw_max;
    p->timestamp = v->mem_ts;
    return OK;
}
#endif

EXPORT ze_result_t zesPowerGetProperties(void *h, zes_power_properties_t *p) {
    COMP_CALL(h);
    (void)v;
    p->onSubdevice = 0;
    p->subdeviceId = 0;
    p->canControl = 0;
    p->isEnergyThresholdSupported = 0;
    p->defaultLimit = p->minLimit = p->maxLimit = -1;
    return OK;
}

EXPORT ze_result_t zesPowerGetEnergyCounter(void *h, zes_power_energy_counter_t *p) {
    COMP_CALL(h);
    v->energy_uj += v->energy_step_uj;
    v->energy_ts_us += v->energy_ts_step_us;
    p->energy = v->energy_uj;
    p->timestamp = v->energy_ts_us;
    return OK;
}

EXPORT ze_result_t zesFrequencyGetProperties(void *h, zes_freq_properties_t *p) {
    COMP_CALL(h);
    p->type = c->type;
    p->onSubdevice = 0;
    p->subdeviceId = 0;
    p->canControl = 0;
    p->isThrottleEventSupported = 0;
    p->min = 300.0;
    p->max = v->freq_max[c->type];
    return OK;
}

EXPORT ze_result_t zesFrequencyGetState(void *h, zes_freq_state_t *p) {
    COMP_CALL(h);
    p->currentVoltage = -1.0;
    p->request = p->tdp = p->efficient = -1.0;
    p->actual = v->freq_actual[c->type];
    p->throttleReasons = v->throttle[c->type];
    return OK;
}

EXPORT ze_result_t zesTemperatureGetProperties(void *h, zes_temp_properties_t *p) {
    COMP_CALL(h);
    (void)v;
    p->type = c->type;
    p->onSubdevice = c->tile >= 0;
    p->subdeviceId = (uint32_t)(c->tile < 0 ? 0 : c->tile);
    p->maxTemperature = 105.0;
    p->isCriticalTempSupported = p->isThreshold1Supported = p->isThreshold2Supported = 0;
    return OK;
}

EXPORT ze_result_t zesTemperatureGetState(void *h, double *p) {
    COMP_CALL(h);
    *p = c->tile == 1 ? v->temp_tile1[c->type] : v->temp[c->type];
    return OK;
}

EXPORT ze_result_t zesEngineGetProperties(void *h, zes_engine_properties_t *p) {
    COMP_CALL(h);
    p->type = c->type;
    p->onSubdevice = v->tiles > 1;
    p->subdeviceId = (uint32_t)c->tile;
    return OK;
}

#ifndef ZF_OLD_LOADER
EXPORT ze_result_t zesEngineGetActivity(void *h, zes_engine_stats_t *p) {
    COMP_CALL(h);
    v->engine_active[c->tile][c->type] += v->engine_step[c->tile][c->type];
    v->engine_ts[c->tile][c->type] += v->engine_ts_step;
    p->activeTime = v->engine_active[c->tile][c->type];
    p->timestamp = v->engine_ts[c->tile][c->type];
    return OK;
}
#endif

EXPORT ze_result_t zesRasGetProperties(void *h, zes_ras_properties_t *p) {
    COMP_CALL(h);
    (void)v;
    p->type = c->type;  /* 0 correctable, 1 uncorrectable */
    p->onSubdevice = 0;
    p->subdeviceId = 0;
    return OK;
}

EXPORT ze_result_t zesRasGetState(void *h, ze_bool_t clear, zes_ras_state_t *p) {
    COMP_CALL(h);
    for (int i = 0; i < ZF_RAS_CATEGORIES; i++) p->category[i] = v->ras[c->type][i];
    if (clear) memset(v->ras[c->type], 0, sizeof v->ras[c->type]);
    return OK;
}

/* The 13 experimental categories: the seven of zes_ras_state_t, then MEMORY_ERRORS (7),
 * SCALE, L3FABRIC, PCIE, FABRIC_PORT, SOC_INTERNAL; counts only, never cleared. */
EXPORT ze_result_t zesRasGetStateExp(void *h, uint32_t *pCount, zes_ras_state_exp_t *p) {
    COMP_CALL(h);
    if (!pCount) return INVALID_NULL_POINTER;
    if (*pCount == 0 || !p) { *pCount = 13; return OK; }
    if (*pCount > 13) *pCount = 13;
    for (uint32_t i = 0; i < *pCount; i++) {
        p[i].category = (int32_t)i;
        p[i].errorCounter = i < ZF_RAS_CATEGORIES ? v->ras[c->type][i] : i == 7 ? v->ras_memory[c->type] : 0;
    }
    return OK;
}

EXPORT ze_result_t zesFabricPortGetProperties(void *h, zes_fabric_port_properties_t *p) {
    COMP_CALL(h);
    (void)v;
    memset(p->model, 0, sizeof p->model);
    strcpy(p->model, "XeLink");
    p->onSubdevice = 0;
    p->subdeviceId = 0;
    p->portId = (zes_fabric_port_id_t){(uint32_t)(c->dev + 1), 0, (uint8_t)(c->type + 1)};
    p->maxRxSpeed = p->maxTxSpeed = (zes_fabric_port_speed_t){90000000000LL, 4};
    return OK;
}

EXPORT ze_result_t zesFabricPortGetState(void *h, zes_fabric_port_state_t *p) {
    COMP_CALL(h);
    p->status = v->port_status[c->type];
    p->qualityIssues = p->failureReasons = 0;
    p->remotePortId = (zes_fabric_port_id_t){0, 0, 0};
    p->rxSpeed = p->txSpeed = (zes_fabric_port_speed_t){-1, -1};
    return OK;
}

EXPORT ze_result_t zesFabricPortGetThroughput(void *h, zes_fabric_port_throughput_t *p) {
    COMP_CALL(h);
    v->port_rx[c->type] += v->port_step;
    v->port_tx[c->type] += v->port_step;
    p->timestamp = 0;
    p->rxCounter = v->port_rx[c->type];
    p->txCounter = v->port_tx[c->type];
    return OK;
}

/* Sizes and offsets of the shared state, checked against control.py's ctypes mirror. */
EXPORT void zf_layout(uint64_t *out) {
    out[0] = sizeof(zf_state_t);
    out[1] = sizeof(zf_device_t);
    out[2] = offsetof(zf_state_t, dev);
    out[3] = offsetof(zf_device_t, uuid);
    out[4] = offsetof(zf_device_t, engine_step);
    out[5] = offsetof(zf_device_t, temp);
    out[6] = offsetof(zf_device_t, ras);
    out[7] = offsetof(zf_device_t, port_step);
}
