/* A fake libamd_smi.so for tests: the real amdsmi Python package loads it via ROCM_PATH.
 *
 * Types and prototypes come from amdsmi_types.h, generated from the installed
 * wrapper (gen_header.py); every other symbol the wrapper binds is a weak stub
 * (gen_stubs.py). Devices and faults live in a shared file (fake_state.h) named
 * by FAKE_AMDSMI_STATE, mapped at amdsmi_init: without it the library loads but
 * amdsmi_init reports DRIVER_NOT_LOADED, like a node with ROCm but no amdgpu.
 *
 * Every device call goes through guard(): not initialised -> NOT_INIT; the
 * fault rules (../fault_rules.h) -> a delay, a hang and/or their status; a lost
 * device -> its lost_status.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "amdsmi_types.h"
#include "fake_state.h"

#define API __attribute__((visibility("default")))
#define ANY (-1)
#define POLL_NS 5000000L /* 5 ms between checks while waiting for events */

static fake_state_t *S;
static int initialised;
static char device_tokens[FAKE_MAX_DEVICES];
static char socket_tokens[FAKE_MAX_DEVICES];
static pthread_mutex_t notify_lock = PTHREAD_MUTEX_INITIALIZER;
static int notify_on[FAKE_MAX_DEVICES];
static uint64_t notify_mask[FAKE_MAX_DEVICES];

API uint32_t fake_amdsmi_state_size(void) { return (uint32_t)sizeof(fake_state_t); }

static void nap(void) { fr_sleep_ns(POLL_NS); }

/* The fault rules: 8-aligned in the page-aligned mapping although the state is
 * packed, so the atomics of ../fault_rules.h may take their address. */
_Static_assert(offsetof(fake_state_t, faults) % 8 == 0, "fr_faults_t must stay 8-aligned");
static fr_faults_t *faults(void) { return (fr_faults_t *)((char *)S + offsetof(fake_state_t, faults)); }

static int device_of(void *handle) {
    char *p = (char *)handle;
    if (S == NULL || p < device_tokens || p >= device_tokens + S->device_count) return -1;
    return (int)(p - device_tokens);
}

/* Entry check of every device call; on success *dev is the device index. */
static uint32_t guard(const char *fn, void *handle, int64_t arg, int *dev) {
    if (!initialised || S == NULL) return AMDSMI_STATUS_NOT_INIT;
    *dev = device_of(handle);
    if (*dev < 0) return AMDSMI_STATUS_INVAL;
    fr_count(faults());
    uint32_t status = (uint32_t)fr_apply(faults(), fn, *dev, arg, 1);
    if (status != AMDSMI_STATUS_SUCCESS) return status;
    if (S->devices[*dev].lost_status) return S->devices[*dev].lost_status;
    return AMDSMI_STATUS_SUCCESS;
}

#define GUARD(handle, arg)                                          \
    int dev;                                                        \
    uint32_t status_ = guard(__func__, (handle), (arg), &dev);      \
    if (status_ != AMDSMI_STATUS_SUCCESS) return status_;           \
    fake_device_t *D = &S->devices[dev];                            \
    (void)D

static void copy(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

/* -- library lifecycle and enumeration ---------------------------------- */

API uint32_t amdsmi_init(uint64_t flags) {
    (void)flags;
    if (initialised) return AMDSMI_STATUS_SUCCESS;
    const char *path = getenv("FAKE_AMDSMI_STATE");
    if (path == NULL || path[0] == '\0') return AMDSMI_STATUS_DRIVER_NOT_LOADED;
    fake_state_t *state = fr_map_state(path, sizeof(fake_state_t), FAKE_MAGIC);
    if (state == NULL)
        return errno == EINVAL ? AMDSMI_STATUS_INIT_ERROR : AMDSMI_STATUS_DRIVER_NOT_LOADED;
    if (state->version != FAKE_VERSION || state->device_count > FAKE_MAX_DEVICES) {
        munmap(state, sizeof(fake_state_t));
        return AMDSMI_STATUS_INIT_ERROR;
    }
    if (state->init_status != AMDSMI_STATUS_SUCCESS) {
        uint32_t status = state->init_status;
        munmap(state, sizeof(fake_state_t));
        return status;
    }
    S = state;
    initialised = 1;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_shut_down(void) {
    if (!initialised) return AMDSMI_STATUS_NOT_INIT;
    initialised = 0;
    /* Left mapped: a thread may still be inside a call (the real library
     * also tolerates late callers); the mapping goes with the process. */
    return AMDSMI_STATUS_SUCCESS;
}

/* The state's lib_version (a test sets an older one: before 26.5.0 amdsmi did not
 * decode the AFIDs of corrected errors); 26.5.0 before init or when unset. */
API uint32_t amdsmi_get_lib_version(struct_amdsmi_version_t *version) {
    static char build[48];
    if (version == NULL) return AMDSMI_STATUS_INVAL;
    memset(version, 0, sizeof *version);
    uint32_t v[3] = {26, 5, 0};
    if (S != NULL && (S->lib_version[0] | S->lib_version[1] | S->lib_version[2]) != 0)
        memcpy(v, S->lib_version, sizeof v);
    version->major = v[0];
    version->minor = v[1];
    version->release = v[2];
    snprintf(build, sizeof build, "%u.%u.%u-fake", v[0], v[1], v[2]);
    version->build = build;
    return AMDSMI_STATUS_SUCCESS;
}

/* One socket per GPU, as on MI300X nodes. */
API uint32_t amdsmi_get_socket_handles(uint32_t *count, void **sockets) {
    if (!initialised) return AMDSMI_STATUS_NOT_INIT;
    if (count == NULL) return AMDSMI_STATUS_INVAL;
    if (sockets == NULL) {
        *count = S->device_count;
        return AMDSMI_STATUS_SUCCESS;
    }
    uint32_t n = *count < S->device_count ? *count : S->device_count;
    for (uint32_t i = 0; i < n; i++) sockets[i] = &socket_tokens[i];
    *count = n;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_processor_handles(void *socket, uint32_t *count, void **procs) {
    if (!initialised) return AMDSMI_STATUS_NOT_INIT;
    char *p = socket;
    if (count == NULL || p < socket_tokens || p >= socket_tokens + S->device_count)
        return AMDSMI_STATUS_INVAL;
    if (procs == NULL) {
        *count = 1;
        return AMDSMI_STATUS_SUCCESS;
    }
    if (*count >= 1) {
        procs[0] = &device_tokens[p - socket_tokens];
        *count = 1;
    }
    return AMDSMI_STATUS_SUCCESS;
}

/* The socket's id, from what the library learnt at init (no device call, so no
 * rule applies): its PCI address, "DDDD:BB:DD.F" as amdsmi writes it. */
API uint32_t amdsmi_get_socket_info(void *socket, size_t len, char *name) {
    if (!initialised) return AMDSMI_STATUS_NOT_INIT;
    char *p = socket;
    if (name == NULL || p < socket_tokens || p >= socket_tokens + S->device_count)
        return AMDSMI_STATUS_INVAL;
    uint64_t bdf = S->devices[p - socket_tokens].bdf;
    snprintf(name, len, "%04llX:%02X:%02X.%X", (unsigned long long)(bdf >> 16),
             (unsigned)((bdf >> 8) & 0xff), (unsigned)((bdf >> 3) & 0x1f), (unsigned)(bdf & 7));
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_processor_type(void *h, uint32_t *type) {
    GUARD(h, ANY);
    *type = AMDSMI_PROCESSOR_TYPE_AMD_GPU;
    return AMDSMI_STATUS_SUCCESS;
}

/* -- identity ------------------------------------------------------------ */

API uint32_t amdsmi_get_gpu_device_uuid(void *h, uint32_t *len, char *uuid) {
    GUARD(h, ANY);
    size_t need = strlen(D->uuid) + 1;
    if (len == NULL || uuid == NULL) return AMDSMI_STATUS_INVAL;
    if (*len < need) {
        *len = (uint32_t)need;
        return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    }
    copy(uuid, *len, D->uuid);
    *len = (uint32_t)need;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_device_bdf(void *h, union_amdsmi_bdf_t *bdf) {
    GUARD(h, ANY);
    bdf->as_uint = D->bdf;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_asic_info(void *h, struct_amdsmi_asic_info_t *info) {
    GUARD(h, ANY);
    memset(info, 0, sizeof *info);
    copy(info->market_name, sizeof info->market_name, D->market_name);
    info->vendor_id = 0x1002;
    copy(info->vendor_name, sizeof info->vendor_name, "Advanced Micro Devices Inc. [AMD/ATI]");
    info->subvendor_id = 0x1002;
    info->device_id = 0x74a1;
    info->rev_id = 0;
    copy(info->asic_serial, sizeof info->asic_serial, D->asic_serial);
    info->oam_id = (uint32_t)dev;
    info->num_of_compute_units = 304;
    info->target_graphics_version = 0x942;
    info->subsystem_id = 0x74a1;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_board_info(void *h, struct_amdsmi_board_info_t *info) {
    GUARD(h, ANY);
    memset(info, 0, sizeof *info);
    copy(info->model_number, sizeof info->model_number, "102-G30211-00");
    copy(info->product_serial, sizeof info->product_serial, D->board_serial);
    copy(info->product_name, sizeof info->product_name, D->market_name);
    copy(info->manufacturer_name, sizeof info->manufacturer_name, "AMD");
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_xgmi_info(void *h, struct_amdsmi_xgmi_info_t *info) {
    GUARD(h, ANY);
    if (D->xgmi_unsupported) return AMDSMI_STATUS_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->xgmi_lanes = 16;
    info->xgmi_hive_id = D->xgmi_hive_id;
    info->xgmi_node_id = D->xgmi_node_id;
    info->index = (uint32_t)dev;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_vbios_info(void *h, struct_amdsmi_vbios_info_t *info) {
    GUARD(h, ANY);
    memset(info, 0, sizeof *info);
    copy(info->name, sizeof info->name, "AMD MI300X_HW_SRIOV_CVS_1VF");
    copy(info->build_date, sizeof info->build_date, "2024/05/20 13:47");
    copy(info->part_number, sizeof info->part_number, D->vbios_part);
    copy(info->version, sizeof info->version, D->vbios_version);
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_driver_info(void *h, struct_amdsmi_driver_info_t *info) {
    GUARD(h, ANY);
    memset(info, 0, sizeof *info);
    copy(info->driver_version, sizeof info->driver_version, D->driver_version);
    copy(info->driver_date, sizeof info->driver_date, "2015/01/01 00:00");
    copy(info->driver_name, sizeof info->driver_name, "amdgpu");
    return AMDSMI_STATUS_SUCCESS;
}

static uint32_t partition_string(const char *value, char *out, uint32_t len) {
    if (value[0] == '\0') return AMDSMI_STATUS_NOT_SUPPORTED;
    if (out == NULL || len <= strlen(value)) return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    copy(out, len, value);
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_compute_partition(void *h, char *out, uint32_t len) {
    GUARD(h, ANY);
    return partition_string(D->compute_partition, out, len);
}

API uint32_t amdsmi_get_gpu_memory_partition(void *h, char *out, uint32_t len) {
    GUARD(h, ANY);
    return partition_string(D->memory_partition, out, len);
}

API uint32_t amdsmi_get_gpu_kfd_info(void *h, struct_amdsmi_kfd_info_t *info) {
    GUARD(h, ANY);
    memset(info, 0, sizeof *info);
    info->kfd_id = 0x1000u + (uint64_t)dev;
    info->node_id = (uint32_t)dev + 1;
    info->current_partition_id = D->partition_id;
    return AMDSMI_STATUS_SUCCESS;
}

/* -- fast fields ----------------------------------------------------------- */

API uint32_t amdsmi_get_gpu_activity(void *h, struct_amdsmi_engine_usage_t *usage) {
    GUARD(h, ANY);
    memset(usage, 0, sizeof *usage);
    usage->gfx_activity = D->gfx_activity;
    usage->umc_activity = D->umc_activity;
    usage->mm_activity = D->mm_activity;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_memory_total(void *h, uint32_t type, uint64_t *total) {
    GUARD(h, type);
    if (type >= FAKE_NUM_MEM || total == NULL) return AMDSMI_STATUS_INVAL;
    *total = D->mem_total[type];
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_memory_usage(void *h, uint32_t type, uint64_t *used) {
    GUARD(h, type);
    if (type >= FAKE_NUM_MEM || used == NULL) return AMDSMI_STATUS_INVAL;
    *used = D->mem_used[type];
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_temp_metric(void *h, uint32_t type, uint32_t metric, int64_t *value) {
    GUARD(h, type);
    if (value == NULL) return AMDSMI_STATUS_INVAL;
    if (type >= FAKE_NUM_TEMPS || (D->temp_unsupported >> type) & 1u) return AMDSMI_STATUS_NOT_SUPPORTED;
    int limit = metric == AMDSMI_TEMP_MAX ? 0 : metric == AMDSMI_TEMP_CRITICAL ? 1
              : metric == AMDSMI_TEMP_EMERGENCY ? 2 : -1;
    if (limit >= 0) {
        if (D->temp_limit[type][limit] == 0) return AMDSMI_STATUS_NOT_SUPPORTED;
        *value = D->temp_limit[type][limit];
        return AMDSMI_STATUS_SUCCESS;
    }
    if (metric != AMDSMI_TEMP_CURRENT) return AMDSMI_STATUS_NOT_SUPPORTED;
    *value = D->temp[type];
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_power_info(void *h, struct_amdsmi_power_info_t *info) {
    GUARD(h, ANY);
    memset(info, 0, sizeof *info);
    info->socket_power = D->socket_power;
    info->current_socket_power = D->current_socket_power;
    info->average_socket_power = D->average_socket_power;
    info->gfx_voltage = 0xFFFF;
    info->soc_voltage = 0xFFFF;
    info->mem_voltage = 0xFFFF;
    info->power_limit = D->power_limit;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_power_cap_info(void *h, uint32_t sensor, struct_amdsmi_power_cap_info_t *info) {
    GUARD(h, sensor);
    if (sensor != 0) return AMDSMI_STATUS_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->power_cap = D->power_cap_uw;
    info->default_power_cap = D->power_cap_default_uw;
    info->min_power_cap = D->power_cap_min_uw;
    info->max_power_cap = D->power_cap_max_uw;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_energy_count(void *h, uint64_t *acc, float *resolution, uint64_t *timestamp) {
    GUARD(h, ANY);
    if (acc == NULL || resolution == NULL || timestamp == NULL) return AMDSMI_STATUS_INVAL;
    *acc = __atomic_add_fetch(&D->energy_acc, D->energy_step, __ATOMIC_SEQ_CST);
    *resolution = D->energy_resolution;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *timestamp = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_clock_info(void *h, uint32_t type, struct_amdsmi_clk_info_t *info) {
    GUARD(h, type);
    if (type >= FAKE_NUM_CLOCKS || (D->clk_unsupported >> type) & 1u) return AMDSMI_STATUS_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->clk = D->clk[type];
    info->min_clk = D->clk_min[type];
    info->max_clk = D->clk_max[type];
    info->clk_locked = 0;
    info->clk_deep_sleep = 0;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_fan_speed(void *h, uint32_t sensor, int64_t *speed) {
    GUARD(h, sensor);
    if (!D->fan_supported || sensor != 0) return AMDSMI_STATUS_NOT_SUPPORTED;
    *speed = D->fan_speed;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_fan_speed_max(void *h, uint32_t sensor, uint64_t *speed) {
    GUARD(h, sensor);
    if (!D->fan_supported || sensor != 0) return AMDSMI_STATUS_NOT_SUPPORTED;
    *speed = (uint64_t)D->fan_max;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_pcie_info(void *h, struct_amdsmi_pcie_info_t *info) {
    GUARD(h, ANY);
    memset(info, 0, sizeof *info);
    info->pcie_static.max_pcie_width = (uint16_t)D->pcie_max_width;
    info->pcie_static.max_pcie_speed = D->pcie_max_speed;
    info->pcie_static.pcie_interface_version = D->pcie_interface_version;
    info->pcie_static.slot_type = AMDSMI_CARD_FORM_FACTOR_OAM;
    info->pcie_metric.pcie_width = (uint16_t)D->pcie_width;
    info->pcie_metric.pcie_speed = D->pcie_speed;
    info->pcie_metric.pcie_bandwidth = D->pcie_bandwidth;
    info->pcie_metric.pcie_replay_count = D->pcie_replay;
    info->pcie_metric.pcie_l0_to_recovery_count = D->pcie_recovery;
    info->pcie_metric.pcie_replay_roll_over_count = D->pcie_replay_roll_over;
    info->pcie_metric.pcie_nak_sent_count = D->pcie_nak_sent;
    info->pcie_metric.pcie_nak_received_count = D->pcie_nak_received;
    info->pcie_metric.pcie_lc_perf_other_end_recovery_count = (uint32_t)D->pcie_other_end_recovery;
    return AMDSMI_STATUS_SUCCESS;
}

/* gpu_metrics: everything all-ones ("N/A" to the wrapper) except what a
 * MI300X reports and the fake models. */
API uint32_t amdsmi_get_gpu_metrics_info(void *h, struct_amdsmi_gpu_metrics_t *m) {
    GUARD(h, ANY);
    memset(m, 0xFF, sizeof *m);
    m->common_header.structure_size = (uint16_t)sizeof *m;
    m->common_header.format_revision = 1;
    m->common_header.content_revision = 8;
    m->temperature_hotspot = (uint16_t)D->temp[AMDSMI_TEMPERATURE_TYPE_HOTSPOT];
    m->temperature_mem = (uint16_t)D->temp[AMDSMI_TEMPERATURE_TYPE_VRAM];
    for (int i = 0; i < 4; i++) m->temperature_hbm[i] = (uint16_t)D->temp[AMDSMI_TEMPERATURE_TYPE_HBM_0 + i];
    m->average_gfx_activity = (uint16_t)D->gfx_activity;
    m->average_umc_activity = (uint16_t)D->umc_activity;
    m->current_socket_power = (uint16_t)D->current_socket_power;
    m->energy_accumulator = D->energy_acc;
    m->current_uclk = (uint16_t)D->clk[AMDSMI_CLK_TYPE_MEM];
    for (int i = 0; i < 8; i++) m->current_gfxclks[i] = (uint16_t)D->clk[AMDSMI_CLK_TYPE_GFX];
    for (int i = 0; i < 4; i++) m->vcn_activity[i] = D->vcn_activity[i];
    for (int i = 0; i < 32; i++) m->jpeg_activity[i] = D->jpeg_activity[i];
    for (int i = 0; i < 8; i++) {
        m->xgmi_read_data_acc[i] = D->xgmi_read_kb[i];
        m->xgmi_write_data_acc[i] = D->xgmi_write_kb[i];
        m->xgmi_link_status[i] = D->xgmi_link_status[i];
    }
    m->pcie_link_width = (uint16_t)D->pcie_width;
    m->pcie_link_speed = (uint16_t)(D->pcie_speed / 1000u);
    m->pcie_replay_count_acc = D->pcie_replay;
    m->pcie_l0_to_recov_count_acc = D->pcie_recovery;
    m->accumulation_counter = D->accumulation_counter;
    m->prochot_residency_acc = D->residency[0];
    m->ppt_residency_acc = D->residency[1];
    m->socket_thm_residency_acc = D->residency[2];
    m->vr_thm_residency_acc = D->residency[3];
    m->hbm_thm_residency_acc = D->residency[4];
    m->num_partition = D->num_partition;
    m->pcie_lc_perf_other_end_recovery = (uint32_t)D->pcie_other_end_recovery;
    if (D->xcp_set) {
        for (int x = 0; x < FAKE_NUM_XCP; x++) {
            struct_amdsmi_gpu_xcp_metrics_t *xs = &m->xcp_stats[x];
            for (int c = 0; c < FAKE_NUM_XCC; c++) {
                xs->gfx_busy_inst[c] = D->xcp_busy[x][c];
                xs->gfx_below_host_limit_ppt_acc[c] = D->xcp_acc[0][x][c];
                xs->gfx_below_host_limit_thm_acc[c] = D->xcp_acc[1][x][c];
                xs->gfx_low_utilization_acc[c] = D->xcp_acc[2][x][c];
                xs->gfx_below_host_limit_total_acc[c] = D->xcp_acc[3][x][c];
            }
        }
    }
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_violation_status(void *h, struct_amdsmi_violation_status_t *v) {
    GUARD(h, ANY);
    memset(v, 0xFF, sizeof *v);
    v->acc_counter = D->accumulation_counter;
    v->acc_prochot_thrm = D->residency[0];
    v->acc_ppt_pwr = D->residency[1];
    v->acc_socket_thrm = D->residency[2];
    v->acc_vr_thrm = D->residency[3];
    v->acc_hbm_thrm = D->residency[4];
    v->active_prochot_thrm = D->violation_active[0];
    v->active_ppt_pwr = D->violation_active[1];
    v->active_socket_thrm = D->violation_active[2];
    v->active_vr_thrm = D->violation_active[3];
    v->active_hbm_thrm = D->violation_active[4];
    v->active_gfx_clk_below_host_limit = D->violation_active[5];
    return AMDSMI_STATUS_SUCCESS;
}

/* -- slow fields ----------------------------------------------------------- */

static void error_count(struct_amdsmi_error_count_t *ec, uint64_t corrected, uint64_t uncorrected,
                        uint64_t deferred) {
    memset(ec, 0, sizeof *ec);
    ec->correctable_count = corrected;
    ec->uncorrectable_count = uncorrected;
    ec->deferred_count = deferred;
}

API uint32_t amdsmi_get_gpu_total_ecc_count(void *h, struct_amdsmi_error_count_t *ec) {
    GUARD(h, ANY);
    if (D->ecc_enabled == 0) return AMDSMI_STATUS_NOT_SUPPORTED;
    error_count(ec, D->ecc_total[0], D->ecc_total[1], D->ecc_total[2]);
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_ecc_enabled(void *h, uint64_t *blocks) {
    GUARD(h, ANY);
    *blocks = D->ecc_enabled;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_ecc_count(void *h, uint64_t block, struct_amdsmi_error_count_t *ec) {
    GUARD(h, (int64_t)block);
    for (int bit = 0; bit < FAKE_NUM_BLOCKS; bit++) {
        if (block == (1ull << bit)) {
            if (!(D->ecc_enabled & block)) return AMDSMI_STATUS_NOT_SUPPORTED;
            error_count(ec, D->ecc_block[bit][0], D->ecc_block[bit][1], D->ecc_block[bit][2]);
            return AMDSMI_STATUS_SUCCESS;
        }
    }
    return AMDSMI_STATUS_INVAL;
}

/* Fills up to *max entries; OUT_OF_RESOURCES when more processes exist (amdsmi.h). */
API uint32_t amdsmi_get_gpu_process_list(void *h, uint32_t *max, struct_amdsmi_proc_info_t *list) {
    GUARD(h, ANY);
    if (max == NULL) return AMDSMI_STATUS_INVAL;
    uint32_t count = D->proc_count < FAKE_MAX_PROCS ? D->proc_count : FAKE_MAX_PROCS;
    if (list == NULL) {
        *max = count;
        return AMDSMI_STATUS_SUCCESS;
    }
    uint32_t n = count < *max ? count : *max;
    for (uint32_t i = 0; i < n; i++) {
        struct_amdsmi_proc_info_t *p = &list[i];
        memset(p, 0, sizeof *p);
        copy(p->name, sizeof p->name, D->proc_name[i]);
        p->pid = D->proc_pid[i];
        p->mem = D->proc_vram[i] + D->proc_gtt[i];
        p->memory_usage.vram_mem = D->proc_vram[i];
        p->memory_usage.gtt_mem = D->proc_gtt[i];
        p->cu_occupancy = D->proc_cu[i];
    }
    *max = n;
    return count > n ? AMDSMI_STATUS_OUT_OF_RESOURCES : AMDSMI_STATUS_SUCCESS;
}

/* -- event notification --------------------------------------------------- */

API uint32_t amdsmi_init_gpu_event_notification(void *h) {
    GUARD(h, ANY);
    pthread_mutex_lock(&notify_lock);
    notify_on[dev] = 1;
    notify_mask[dev] = 0;
    pthread_mutex_unlock(&notify_lock);
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_set_gpu_event_notification_mask(void *h, uint64_t mask) {
    GUARD(h, ANY);
    pthread_mutex_lock(&notify_lock);
    uint32_t status = notify_on[dev] ? AMDSMI_STATUS_SUCCESS : AMDSMI_STATUS_INVAL;
    if (notify_on[dev]) notify_mask[dev] = mask;
    pthread_mutex_unlock(&notify_lock);
    return status;
}

API uint32_t amdsmi_stop_gpu_event_notification(void *h) {
    GUARD(h, ANY);
    pthread_mutex_lock(&notify_lock);
    uint32_t status = notify_on[dev] ? AMDSMI_STATUS_SUCCESS : AMDSMI_STATUS_INVAL;
    notify_on[dev] = 0;
    pthread_mutex_unlock(&notify_lock);
    return status;
}

/* Takes queued events; delivers those of devices listening for their type. */
static uint32_t take_events(uint32_t capacity, struct_amdsmi_evt_notification_data_t *data) {
    uint32_t n = 0;
    pthread_mutex_lock(&notify_lock);
    while (n < capacity) {
        uint32_t tail = __atomic_load_n(&S->event_tail, __ATOMIC_SEQ_CST);
        if (tail == __atomic_load_n(&S->event_head, __ATOMIC_SEQ_CST)) break;
        fake_event_t ev = S->events[tail % FAKE_MAX_EVENTS];
        __atomic_store_n(&S->event_tail, tail + 1, __ATOMIC_SEQ_CST);
        if (ev.device >= S->device_count || !notify_on[ev.device] || ev.event == 0) continue;
        if (!(notify_mask[ev.device] & (1ull << (ev.event - 1)))) continue;
        memset(&data[n], 0, sizeof data[n]);
        data[n].processor_handle = &device_tokens[ev.device];
        data[n].event = ev.event;
        copy(data[n].message, sizeof data[n].message, ev.message);
        n++;
    }
    pthread_mutex_unlock(&notify_lock);
    return n;
}

/* Waits up to timeout_ms; NO_DATA when nothing arrived (as rocm_smi does). */
API uint32_t amdsmi_get_gpu_event_notification(int32_t timeout_ms, uint32_t *num,
                                               struct_amdsmi_evt_notification_data_t *data) {
    if (!initialised || S == NULL) return AMDSMI_STATUS_NOT_INIT;
    if (num == NULL || data == NULL || *num == 0) return AMDSMI_STATUS_INVAL;
    uint32_t status = (uint32_t)fr_apply(faults(), __func__, ANY, ANY, 1);
    if (status != AMDSMI_STATUS_SUCCESS) return status;
    uint32_t capacity = *num;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        uint32_t n = take_events(capacity, data);
        if (n > 0) {
            *num = n;
            return AMDSMI_STATUS_SUCCESS;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        long waited = (now.tv_sec - start.tv_sec) * 1000L + (now.tv_nsec - start.tv_nsec) / 1000000L;
        if (waited >= timeout_ms || !initialised) break;
        nap();
    }
    *num = 0;
    return AMDSMI_STATUS_NO_DATA;
}

/* -- RAS: CPER records, AFIDs, bad pages ------------------------------------
 *
 * A record is the real amdsmi_cper_hdr_t, one UEFI section descriptor, then
 * the fake's section body (a count and that many AFIDs): the exporter reads
 * only the header, and leaves the section to amdsmi_get_afids_from_cper. */

typedef struct __attribute__((packed)) {
    uint32_t sec_offset, sec_length;
    uint16_t revision;
    uint8_t valid_bits, reserved;
    uint32_t flags;
    uint8_t sec_type[16], fru_id[16];
    uint32_t severity;
    char fru_text[20];
} fake_cper_section_t;
_Static_assert(sizeof(fake_cper_section_t) == 72, "a UEFI section descriptor is 72 bytes");

typedef struct __attribute__((packed)) {
    uint32_t afid_count;
    uint64_t afids[4];
} fake_cper_body_t;

/* The fake's "AMD GPU non-standard error" section type. */
static const uint8_t KNOWN_SECTION[16] = {0x32, 0xac, 0x0c, 0x78, 0x2e, 0x4a, 0x4c, 0x11,
                                          0xa9, 0xfc, 0xe6, 0x9a, 0x1e, 0x57, 0x6a, 0x3b};

static const uint64_t RECORD_SIZE =
    sizeof(struct_amdsmi_cper_hdr_t) + sizeof(fake_cper_section_t) + sizeof(fake_cper_body_t);

static void write_record(char *out, const fake_device_t *D, uint64_t index,
                         const fake_cper_kind_t *kind) {
    memset(out, 0, RECORD_SIZE);
    struct_amdsmi_cper_hdr_t *hdr = (struct_amdsmi_cper_hdr_t *)out;
    memcpy(hdr->signature, "CPER", 4);
    hdr->revision = 0x0100;
    hdr->signature_end = 0xFFFFFFFFu;
    hdr->sec_cnt = 1;
    hdr->error_severity = kind->severity;
    hdr->cper_valid_bits.valid_mask = 1u << 1; /* the timestamp is valid */
    hdr->record_length = kind->flaw == FAKE_CPER_BAD_LENGTH ? 16u : (uint32_t)RECORD_SIZE;
    time_t when = (time_t)(D->cper_time0 + index);
    struct tm tm;
    gmtime_r(&when, &tm);
    hdr->timestamp.seconds = (uint8_t)tm.tm_sec;
    hdr->timestamp.minutes = (uint8_t)tm.tm_min;
    hdr->timestamp.hours = (uint8_t)tm.tm_hour;
    hdr->timestamp.day = (uint8_t)tm.tm_mday;
    hdr->timestamp.month = (uint8_t)(tm.tm_mon + 1);
    hdr->timestamp.year = (uint8_t)(tm.tm_year % 100);
    hdr->timestamp.century = (uint8_t)((tm.tm_year + 1900) / 100);
    memcpy(hdr->creator_id, "amdgpu", 6);
    char id[9];
    snprintf(id, sizeof id, "%08x", (unsigned)index);
    memcpy(hdr->record_id, id, 8);
    fake_cper_section_t *sec = (fake_cper_section_t *)(out + sizeof *hdr);
    sec->sec_offset = (uint32_t)(sizeof *hdr + sizeof *sec);
    sec->sec_length = (uint32_t)sizeof(fake_cper_body_t);
    sec->revision = 0x0100;
    sec->severity = kind->severity;
    if (kind->flaw != FAKE_CPER_UNKNOWN_SECTION) memcpy(sec->sec_type, KNOWN_SECTION, 16);
    fake_cper_body_t *body = (fake_cper_body_t *)(out + sec->sec_offset);
    body->afid_count = kind->flaw == FAKE_CPER_SHORT_SECTION ? 9u : kind->afid_count;
    for (uint32_t k = 0; k < kind->afid_count && k < 4; k++) body->afids[k] = kind->afids[k];
}

API uint32_t amdsmi_get_gpu_cper_entries(void *h, uint32_t severity_mask, char *buf,
                                         uint64_t *buf_size, struct_amdsmi_cper_hdr_t **hdrs,
                                         uint64_t *entry_count, uint64_t *cursor) {
    GUARD(h, ANY);
    if (buf == NULL || buf_size == NULL || hdrs == NULL || entry_count == NULL || cursor == NULL)
        return AMDSMI_STATUS_INVAL;
    if (D->cper_unsupported) return AMDSMI_STATUS_NOT_SUPPORTED;
    uint64_t total = D->cper_kinds_n ? D->cper_count : 0;
    uint64_t i = *cursor < total ? *cursor : total, used = 0, n = 0;
    for (; i < total && n < *entry_count; i++) {
        const fake_cper_kind_t *kind = &D->cper_kinds[i % D->cper_kinds_n];
        if (!(severity_mask & (1u << kind->severity))) continue;
        if (used + RECORD_SIZE > *buf_size) break;
        write_record(buf + used, D, i, kind);
        hdrs[n++] = (struct_amdsmi_cper_hdr_t *)(buf + used);
        used += RECORD_SIZE;
    }
    *buf_size = used;
    *entry_count = n;
    *cursor = i;
    return i < total ? AMDSMI_STATUS_MORE_DATA : AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_afids_from_cper(char *buf, uint32_t size, uint64_t *afids,
                                        uint32_t *num_afids) {
    if (buf == NULL || afids == NULL || num_afids == NULL) return AMDSMI_STATUS_INVAL;
    const struct_amdsmi_cper_hdr_t *hdr = (const struct_amdsmi_cper_hdr_t *)buf;
    if (size < sizeof *hdr + sizeof(fake_cper_section_t) || memcmp(hdr->signature, "CPER", 4) != 0 ||
        hdr->record_length != size || hdr->sec_cnt < 1)
        return AMDSMI_STATUS_INVAL;
    const fake_cper_section_t *sec = (const fake_cper_section_t *)(buf + sizeof *hdr);
    if (memcmp(sec->sec_type, KNOWN_SECTION, 16) != 0) return AMDSMI_STATUS_UNEXPECTED_DATA;
    if ((uint64_t)sec->sec_offset + sec->sec_length > size || sec->sec_length < sizeof(uint32_t))
        return AMDSMI_STATUS_UNEXPECTED_SIZE;
    const fake_cper_body_t *body = (const fake_cper_body_t *)(buf + sec->sec_offset);
    if (sizeof(uint32_t) + body->afid_count * sizeof(uint64_t) > sec->sec_length)
        return AMDSMI_STATUS_UNEXPECTED_SIZE;
    if (body->afid_count > *num_afids) return AMDSMI_STATUS_OUT_OF_RESOURCES;
    for (uint32_t k = 0; k < body->afid_count; k++) afids[k] = body->afids[k];
    *num_afids = body->afid_count;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_bad_page_info(void *h, uint32_t *num_pages,
                                          struct_amdsmi_retired_page_record_t *info) {
    GUARD(h, ANY);
    if (num_pages == NULL) return AMDSMI_STATUS_INVAL;
    if (D->bad_page_unsupported) return AMDSMI_STATUS_NOT_SUPPORTED;
    uint32_t total = D->bad_pages[0] + D->bad_pages[1] + D->bad_pages[2];
    if (info == NULL) {
        *num_pages = total;
        return AMDSMI_STATUS_SUCCESS;
    }
    uint32_t n = 0;
    for (uint32_t status = 0; status < 3; status++) {
        for (uint32_t k = 0; k < D->bad_pages[status] && n < *num_pages; k++, n++) {
            info[n].page_address = 0x100000000ull + (uint64_t)n * 4096u;
            info[n].page_size = 4096;
            info[n].status = status;
        }
    }
    *num_pages = n;
    return AMDSMI_STATUS_SUCCESS;
}

API uint32_t amdsmi_get_gpu_bad_page_threshold(void *h, uint32_t *threshold) {
    GUARD(h, ANY);
    if (threshold == NULL) return AMDSMI_STATUS_INVAL;
    if (D->bad_page_unsupported) return AMDSMI_STATUS_NOT_SUPPORTED;
    *threshold = D->bad_page_threshold;
    return AMDSMI_STATUS_SUCCESS;
}
