/*
 * Shared state of the fake libnvidia-ml.so.1: one fixed C struct in a file
 * that the fake mmaps (path in $FAKE_NVML_STATE) and the Python control helper
 * (tests/fakes/nvml/control.py) maps too. Writes from a test apply at once, even
 * to a daemon's worker process. Every field is a fixed-width type, laid out so
 * that no padding is implicit; tests/unit/test_fake_nvml_layout.py checks the
 * Python mirror against fake_nvml_layout() field by field. Explicit pad
 * fields keep every 64-bit member 8-byte aligned without implicit padding.
 */
#ifndef NVML_FAKE_STATE_H
#define NVML_FAKE_STATE_H

#include <stdint.h>

#include "../fault_rules.h"

#define FAKE_NVML_MAGIC 0x4E564D4Cu /* "NVML" */
#define FAKE_NVML_VERSION 2u
#define FAKE_MAX_DEVICES 16
#define FAKE_MAX_PROCS 16
#define FAKE_MAX_MIG 7
#define FAKE_MAX_EVENTS 64
#define FAKE_MAX_NVLINKS 18
#define FAKE_MAX_FANS 4
#define FAKE_VIOLATIONS 9
#define FAKE_GPM_IDS 176 /* GPM metric ids 0..175 (NVENC 3 is 169) */
#define FAKE_PROC_NAME 32
#define FAKE_MAX_FIELDS 48 /* served nvmlDeviceGetFieldValues entries a test sets */

/* Fault rules (../fault_rules.h): a rule's device is the GPU index, -1 any,
 * NO_DEVICE the calls that take no device. */
#define FAKE_NO_DEVICE (-2)

typedef struct {
    uint32_t pid;
    uint32_t gpu_instance;     /* 0xFFFFFFFF without MIG */
    uint32_t compute_instance; /* 0xFFFFFFFF without MIG */
    uint32_t sm_util;          /* percent, for nvmlDeviceGetProcessUtilization */
    uint32_t mem_util;
    uint32_t graphics;         /* the list: 0 Compute, 1 Graphics, 2 MPSCompute (an MPS client) */
    uint64_t used_memory;      /* bytes; 0xFFFFFFFFFFFFFFFF = not available */
    uint32_t enc_util, dec_util; /* percent, for nvmlDeviceGetProcessUtilization */
    char name[FAKE_PROC_NAME];   /* nvmlSystemGetProcessName; empty: NOT_FOUND */
} fake_proc_t;

typedef struct {
    uint32_t present;
    uint32_t gpu_instance;
    uint32_t compute_instance;
    uint32_t util_percent; /* GPM graphics utilization */
    uint32_t dram_percent; /* GPM DRAM bandwidth utilization */
    uint32_t pad;
    uint64_t memory_total;
    uint64_t memory_used;
    char uuid[48];
} fake_mig_t;

typedef struct {
    uint32_t device;
    uint32_t pad;
    uint64_t type; /* nvmlEventType* bit */
    uint64_t data; /* XID code for 0x8 */
} fake_event_t;

/* One nvmlDeviceGetFieldValues entry as a test sets it: the entry asking for
 * field_id with scope_id is answered with value_type (nvmlValueType_t: 0 double,
 * 1 uint, 2 ulong, 3 ull, 4 sll, 5 sint, 6 ushort) and that union member, taken
 * from the low bytes of raw (the member's own bytes: the rest of the union is
 * left as the caller gave it, as a driver writing one member does). */
typedef struct {
    uint32_t field_id, scope_id;
    uint32_t value_type, pad;
    uint64_t raw;
} fake_field_t;

typedef struct {
    uint32_t lost;          /* 0 ok; 1 every call GPU_IS_LOST; 2 handle lookups still work */
    uint32_t ecc_enabled;
    char name[96];
    char uuid[96];
    char serial[32];
    char vbios[32];
    uint32_t pci_domain, pci_bus, pci_device, pci_device_id, pci_subsystem_id;
    uint32_t util_gpu, util_memory, util_encoder, util_decoder; /* percent */
    uint32_t pad_u;
    uint64_t memory_total, memory_reserved, memory_used;        /* bytes; free is the rest */
    uint32_t temperature_gpu, temperature_memory;               /* C */
    uint32_t power_mw, power_limit_mw;
    uint64_t energy_mj;
    uint64_t energy_step_mj; /* added on every energy read */
    uint32_t clock_mhz[4];   /* graphics, sm, memory, video */
    uint32_t max_clock_mhz[4];
    uint32_t fan_count;
    uint32_t fan_percent[FAKE_MAX_FANS];
    uint32_t pstate;
    uint32_t pcie_tx_kbs, pcie_rx_kbs, pcie_replays;
    uint32_t pcie_gen, pcie_width, pcie_max_gen, pcie_max_width;
    uint32_t pad0;
    uint64_t clocks_event_reasons;
    /* field ids 74 75 76 77 78 79 269 270 271, nanoseconds */
    uint64_t violation_ns[FAKE_VIOLATIONS];
    uint64_t ecc[2][2]; /* [corrected, uncorrected][volatile, aggregate] */
    uint32_t retired_pages[2]; /* [multiple single bit, double bit] */
    uint32_t retired_pending;
    uint32_t remapped_corrected, remapped_uncorrected, remapped_pending, remapped_failure;
    uint32_t nvlink_count;
    uint32_t nvlink_active_mask;
    uint32_t pad1;
    uint64_t nvlink_tx_kib[FAKE_MAX_NVLINKS];
    uint64_t nvlink_rx_kib[FAKE_MAX_NVLINKS];
    uint32_t mig_mode, mig_pending;
    fake_mig_t mig[FAKE_MAX_MIG];
    uint32_t proc_count;
    uint32_t pad2;
    fake_proc_t procs[FAKE_MAX_PROCS];
    uint64_t calls; /* NVML calls made on this device (written by the fake) */
    uint64_t proc_sample_us;  /* timeStamp of process utilization samples; 0: the time of the call */
    uint64_t proc_last_seen;  /* lastSeenTimeStamp of the last GetProcessUtilization (written by the fake) */
    double memory_temp_double; /* nonzero (NaN too): memory temperature served as a double field value */
    /* GPM on the full GPU: nvmlGpmQueryDeviceSupport's isSupportedDevice, and per
     * metric id the value nvmlGpmMetricsGet reports (the one set when the second
     * sample was taken) and the per-entry nvmlReturn (0: the fake's own default,
     * NOT_SUPPORTED for ids it does not know). */
    uint32_t gpm_supported;
    uint32_t recovery_action;   /* field 230, nvmlDeviceGetFieldValues */
    double gpm_value[FAKE_GPM_IDS];
    uint32_t gpm_status[FAKE_GPM_IDS];
    /* nvmlDeviceGetNvLinkErrorCounter: [link][replay, recovery, crc_flit, crc_data] */
    uint64_t nvlink_errors[FAKE_MAX_NVLINKS][4];
    /* nvmlDeviceGetGpuFabricInfoV (v3): state 0 = NOT_SUPPORTED returned */
    uint32_t fabric_state, fabric_status, fabric_health_mask, fabric_clique;
    int32_t margin_temperature; /* C; nvmlDeviceGetMarginTemperature */
    uint32_t margin_supported;
    uint32_t power_min_mw, power_max_mw, power_default_mw;
    uint32_t sram_threshold_exceeded; /* nvmlDeviceGetSramEccErrorStatus; 2: NOT_SUPPORTED */
    uint32_t field_count, field_pad;  /* entries of fields[] in use */
    fake_field_t fields[FAKE_MAX_FIELDS];
    /* The byte nvmlDeviceGetGpuFabricInfoV fills clusterUuid with (0: all zero, no cluster). */
    uint32_t fabric_cluster;
    /* nvmlDeviceGetPlatformInfo (v2), served while platform_chassis is not empty. */
    uint32_t platform_slot, platform_tray, platform_host, platform_module;
    char platform_chassis[16];
} fake_device_t;

typedef struct {
    uint32_t magic;
    uint32_t version;
    uint32_t device_count;
    int32_t init_error;          /* nvmlInit* returns this when non-zero */
    char driver_version[80];
    int32_t cuda_driver_version; /* e.g. 12080 */
    uint32_t pad;
    fr_faults_t faults;          /* calls: every NVML call after init */
    uint64_t event_head;         /* events written so far; ring index = head % FAKE_MAX_EVENTS */
    uint64_t event_sets;         /* event sets created (written by the fake) */
    fake_event_t events[FAKE_MAX_EVENTS];
    fake_device_t devices[FAKE_MAX_DEVICES];
    int64_t gpm_samples_live; /* GPM samples allocated and not yet freed (written by the fake) */
    uint64_t gpm_sample_gets;  /* nvmlGpmSampleGet calls that succeeded (written by the fake) */
    uint64_t gpm_metrics_gets; /* nvmlGpmMetricsGet calls (written by the fake) */
} fake_state_t;

#endif
