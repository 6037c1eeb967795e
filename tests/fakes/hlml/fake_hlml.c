/* A fake libhlml.so serving the HLML 1.24 entry points the hlml backend calls, for
 * tests driven through the real habana-pyhlml package.
 *
 * Structs follow the 1.24 layouts (hlml_pci_info_t 84 bytes with the link_max fields,
 * hlml_utilization_t 8 bytes). The devices live in a file named by $FAKE_HLML_STATE
 * (hlml_fake_state.h) that the test maps too, so values, faults and hangs change while
 * a daemon runs. Without $FAKE_HLML_STATE hlml_init answers DRIVER_NOT_LOADED, as on a
 * node without /dev/hl*. */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hlml_fake_state.h"

#define EXPORT __attribute__((visibility("default")))

#define HLML_SUCCESS 0
#define HLML_ERROR_UNINITIALIZED 1
#define HLML_ERROR_INVALID_ARGUMENT 2
#define HLML_ERROR_NOT_SUPPORTED 3
#define HLML_ERROR_DRIVER_NOT_LOADED 9
#define HLML_ERROR_AIP_IS_LOST 15

typedef struct { char link_speed[10], link_width[10], link_max_speed[10], link_max_width[10]; }
    hlml_pci_cap_t;
typedef struct { unsigned int bus; char bus_id[19]; unsigned int device, domain, pci_device_id;
    hlml_pci_cap_t caps; unsigned int pci_rev, pci_subsys_id; } hlml_pci_info_t;
typedef struct { unsigned int aip, memory; } hlml_utilization_t;
typedef struct { unsigned long long free, total, used; } hlml_memory_t;
typedef struct { unsigned long long reference_time, violation_time; } hlml_violation_time_t;
typedef struct { uint32_t port; char *str_buf; uint64_t *val_buf; uint32_t *num_of_counters_out; }
    hlml_nic_stats_info_t;

_Static_assert(sizeof(hlml_pci_info_t) == 84, "hlml_pci_info_t (1.24)");
_Static_assert(offsetof(hlml_pci_info_t, pci_device_id) == 32, "pci_device_id");
_Static_assert(offsetof(hlml_pci_info_t, pci_rev) == 76, "pci_rev");
_Static_assert(sizeof(hlml_utilization_t) == 8, "hlml_utilization_t (1.24)");
_Static_assert(sizeof(hlml_memory_t) == 24, "hlml_memory_t");
_Static_assert(sizeof(hlml_nic_stats_info_t) == 32, "hlml_nic_stats_info_t");

static const char *NIC_STAT_NAMES[HF_NIC_STATS] = {
    "rx_bytes", "tx_bytes", "rx_crc_errors", "link_down_events"};

static hf_state_t *S;
static int initialised;
static int handles[HF_MAX_DEV];

static int dev_of(const void *h) {
    const int *p = (const int *)h;
    if (p < handles || p >= handles + HF_MAX_DEV) return -1;
    return (int)(p - handles);
}

/* Every call: count it, apply the test's rules (../fault_rules.h), then AIP_IS_LOST for
 * a lost device. */
static int guard(const char *fn, int dev) {
    if (!S || !initialised) return HLML_ERROR_UNINITIALIZED;
    fr_count(&S->faults);
    if (S->chatty) { printf("fake hlml: %s device %d\n", fn, dev); fflush(stdout); }
    int rc = fr_apply(&S->faults, fn, dev, FR_ANY, 1);
    if (rc) return rc;
    if (dev >= 0 && S->dev[dev].lost) return HLML_ERROR_AIP_IS_LOST;
    return HLML_SUCCESS;
}

#define DEVICE_CALL(h) int d_ = dev_of(h); if (d_ < 0 || d_ >= S->devices) return \
    HLML_ERROR_INVALID_ARGUMENT; { int rc_ = guard(__func__, d_); if (rc_) return rc_; } \
    hf_device_t *v = &S->dev[d_]
#define OUT(p) if (!(p)) return HLML_ERROR_INVALID_ARGUMENT

static char state_path[FR_PATH_LEN];

/* Maps $FAKE_HLML_STATE; a later hlml_init with another path (the next in-process
 * test) maps that one instead. */
static int map_state(void) {
    void *state = S;
    if (!fr_follow_env("FAKE_HLML_STATE", sizeof(hf_state_t), HF_MAGIC, &state, state_path))
        return HLML_ERROR_DRIVER_NOT_LOADED;
    S = state;
    return HLML_SUCCESS;
}

EXPORT int hlml_init(void) {
    int rc = map_state();
    if (rc) return rc;
    if (S->chatty) { printf("fake hlml: init\n"); fflush(stdout); }
    if (S->init_rc) return S->init_rc;
    initialised = 1;
    return HLML_SUCCESS;
}

EXPORT int hlml_init_with_flags(unsigned int flags) {
    return flags ? HLML_ERROR_INVALID_ARGUMENT : hlml_init();
}

EXPORT int hlml_shutdown(void) {
    initialised = 0;
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_count(unsigned int *count) {
    int rc = guard(__func__, -1);
    if (rc) return rc;
    OUT(count);
    *count = (unsigned int)(S->devices < HF_MAX_DEV ? S->devices : HF_MAX_DEV);
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_handle_by_index(unsigned int index, void **device) {
    int rc = guard(__func__, (int)index);
    if (rc == HLML_ERROR_AIP_IS_LOST) rc = HLML_SUCCESS;  /* a lost device still has a handle */
    if (rc) return rc;
    OUT(device);
    if (index >= (unsigned int)S->devices || index >= HF_MAX_DEV) return HLML_ERROR_INVALID_ARGUMENT;
    *device = &handles[index];
    return HLML_SUCCESS;
}

static int copy_string(char *out, unsigned int len, const char *value) {
    OUT(out);
    if (len == 0) return HLML_ERROR_INVALID_ARGUMENT;
    size_t n = strnlen(value, len - 1);
    memcpy(out, value, n);
    out[n] = 0;
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_name(void *h, char *name, unsigned int len) {
    DEVICE_CALL(h);
    return copy_string(name, len, v->name);
}

EXPORT int hlml_device_get_uuid(void *h, char *uuid, unsigned int len) {
    DEVICE_CALL(h);
    return copy_string(uuid, len, v->uuid);
}

EXPORT int hlml_device_get_serial(void *h, char *serial, unsigned int len) {
    DEVICE_CALL(h);
    return copy_string(serial, len, v->serial);
}

EXPORT int hlml_get_driver_version(char *version, unsigned int len) {
    int rc = guard(__func__, -1);
    if (rc) return rc;
    return copy_string(version, len, S->driver_version);
}

EXPORT int hlml_device_get_pci_info(void *h, hlml_pci_info_t *pci) {
    DEVICE_CALL(h);
    OUT(pci);
    memset(pci, 0, sizeof *pci);
    pci->bus = v->pci_bus;
    strncpy(pci->bus_id, v->bus_id, sizeof pci->bus_id - 1);
    pci->device = 0;
    pci->domain = 0;
    pci->pci_device_id = (0x1020u << 16) | 0x1da3u;
    strcpy(pci->caps.link_speed, "16.0 GT/s");
    strcpy(pci->caps.link_width, "x16");
    strcpy(pci->caps.link_max_speed, "32.0 GT/s");
    strcpy(pci->caps.link_max_width, "x16");
    pci->pci_rev = 1;
    pci->pci_subsys_id = 0x0001;
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_utilization_rates(void *h, hlml_utilization_t *u) {
    DEVICE_CALL(h);
    OUT(u);
    u->aip = v->util_aip;
    u->memory = v->util_memory;
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_memory_info(void *h, hlml_memory_t *m) {
    DEVICE_CALL(h);
    OUT(m);
    m->total = v->mem_total;
    m->used = v->mem_used;
    m->free = v->mem_free;
    return HLML_SUCCESS;
}

#define UINT_GETTER(fn, field) EXPORT int fn(void *h, unsigned int *out) { \
    DEVICE_CALL(h); OUT(out); *out = v->field; return HLML_SUCCESS; }
UINT_GETTER(hlml_device_get_power_usage, power_mw)
UINT_GETTER(hlml_device_get_power_management_limit, power_limit_mw)
UINT_GETTER(hlml_device_get_pcie_replay_counter, pcie_replay)
UINT_GETTER(hlml_device_get_curr_pcie_link_generation, pcie_gen)
UINT_GETTER(hlml_device_get_curr_pcie_link_width, pcie_width)
UINT_GETTER(hlml_device_get_replaced_rows_pending_status, rows_pending)

EXPORT int hlml_device_get_total_energy_consumption(void *h, unsigned long long *out) {
    DEVICE_CALL(h);
    OUT(out);
    *out = v->energy_mj;
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_temperature(void *h, int sensor, unsigned int *out) {
    DEVICE_CALL(h);
    OUT(out);
    if (sensor < 0 || sensor >= HF_SENSORS || !(v->sensor_mask & (1 << sensor)))
        return HLML_ERROR_NOT_SUPPORTED;
    *out = v->temp[sensor];
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_clock_info(void *h, int type, unsigned int *out) {
    DEVICE_CALL(h);
    OUT(out);
    if (type != 0) return HLML_ERROR_NOT_SUPPORTED;  /* Gaudi: SOC only */
    *out = v->clock_mhz;
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_max_clock_info(void *h, int type, unsigned int *out) {
    DEVICE_CALL(h);
    OUT(out);
    if (type != 0) return HLML_ERROR_NOT_SUPPORTED;
    *out = v->clock_max_mhz;
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_total_ecc_errors(void *h, int type, int counter, unsigned long long *out) {
    DEVICE_CALL(h);
    OUT(out);
    if (type < 0 || type > 1 || counter < 0 || counter > 1) return HLML_ERROR_INVALID_ARGUMENT;
    *out = (unsigned long long)v->ecc[type][counter];
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_replaced_rows(void *h, int cause, unsigned int *count, void *rows) {
    DEVICE_CALL(h);
    OUT(count);
    if (cause < 0 || cause > 1) return HLML_ERROR_INVALID_ARGUMENT;
    (void)rows;  /* the backend asks for the count only */
    *count = v->replaced_rows[cause];
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_current_clocks_throttle_reasons(void *h, unsigned long long *out) {
    DEVICE_CALL(h);
    OUT(out);
    *out = v->throttle;
    return HLML_SUCCESS;
}

EXPORT int hlml_device_get_violation_status(void *h, int policy, hlml_violation_time_t *out) {
    DEVICE_CALL(h);
    OUT(out);
    if (policy < 0 || policy > 1) return HLML_ERROR_INVALID_ARGUMENT;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    out->reference_time = (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000;
    out->violation_time = v->violation_ns[policy];
    return HLML_SUCCESS;
}

EXPORT int hlml_get_mac_addr_info(void *h, uint64_t *mask, uint64_t *ext_mask) {
    DEVICE_CALL(h);
    OUT(mask);
    OUT(ext_mask);
    mask[0] = v->port_mask[0];
    mask[1] = v->port_mask[1];
    ext_mask[0] = v->port_mask[0] & 0x7;  /* three external (scale-out) ports */
    ext_mask[1] = 0;
    return HLML_SUCCESS;
}

EXPORT int hlml_nic_get_link(void *h, uint32_t port, bool *up) {
    DEVICE_CALL(h);
    OUT(up);
    if (port >= 128 || !(v->port_mask[port / 64] & (1ull << (port % 64))))
        return HLML_ERROR_INVALID_ARGUMENT;
    *up = (v->port_up[port / 64] >> (port % 64)) & 1;
    return HLML_SUCCESS;
}

EXPORT int hlml_nic_get_statistics(void *h, hlml_nic_stats_info_t *info) {
    DEVICE_CALL(h);
    OUT(info);
    OUT(info->str_buf);
    OUT(info->val_buf);
    OUT(info->num_of_counters_out);
    uint32_t port = info->port;
    if (port >= 128 || !(v->port_mask[port / 64] & (1ull << (port % 64))))
        return HLML_ERROR_INVALID_ARGUMENT;
    for (int k = 0; k < HF_NIC_STATS; k++) {
        memset(info->str_buf + 32 * k, 0, 32);
        strncpy(info->str_buf + 32 * k, NIC_STAT_NAMES[k], 31);
        info->val_buf[k] = v->nic_stat[k] + port;
    }
    *info->num_of_counters_out = HF_NIC_STATS;
    return HLML_SUCCESS;
}

EXPORT void hf_layout(uint64_t *out) {
    out[0] = sizeof(hf_state_t);
    out[1] = sizeof(hf_device_t);
    out[2] = offsetof(hf_state_t, dev);
    out[3] = offsetof(hf_device_t, mem_total);
    out[4] = offsetof(hf_device_t, ecc);
    out[5] = offsetof(hf_device_t, nic_stat);
    out[6] = offsetof(hf_device_t, name);
    out[7] = sizeof(hlml_pci_info_t);
}
