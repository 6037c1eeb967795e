/* Shared state of the fake libamd_smi.so.
 *
 * The fake maps the file named by FAKE_AMDSMI_STATE (MAP_SHARED) at amdsmi_init,
 * so a test changes devices and faults while a daemon is running, across
 * processes. tests/fakes/amdsmi/state.py mirrors this layout with ctypes
 * (_pack_ = 1); fake_amdsmi_state_size() lets a test check the two agree.
 */
#ifndef FAKE_AMDSMI_STATE_H
#define FAKE_AMDSMI_STATE_H

#include <stdint.h>

#include "../fault_rules.h"

#define FAKE_MAGIC 0x46414d44u /* "DMAF" */
#define FAKE_VERSION 4u
#define FAKE_MAX_DEVICES 64 /* 8 GPUs in CPX mode: 64 partitions */
#define FAKE_MAX_EVENTS 64
#define FAKE_MAX_PROCS 8
#define FAKE_NUM_TEMPS 7   /* amdsmi temperature types EDGE..HBM_3 */
#define FAKE_NUM_CLOCKS 10 /* amdsmi clock types SYS..DCLK1 */
#define FAKE_NUM_MEM 3     /* VRAM, VIS_VRAM, GTT */
#define FAKE_NUM_BLOCKS 19 /* RAS blocks UMC (bit 0) .. MPIO (bit 18) */
#define FAKE_NUM_RESIDENCY 5
#define FAKE_NUM_VIOLATIONS 6
#define FAKE_MAX_CPER_KINDS 8
#define FAKE_NUM_XCP 8
#define FAKE_NUM_XCC 8
#define FAKE_NUM_XCP_ACC 4 /* below_host_limit_ppt, _thm, low_utilization, below_host_limit_total */

/* Flaws a canned CPER record can carry. */
#define FAKE_CPER_OK 0u
#define FAKE_CPER_BAD_LENGTH 1u      /* the header's record_length is shorter than a header */
#define FAKE_CPER_UNKNOWN_SECTION 2u /* the section type GUID is none the decoder knows */
#define FAKE_CPER_SHORT_SECTION 3u   /* the section claims more AFIDs than it holds */

/* One kind of CPER record: entry i of a device's ring is kind i % cper_kinds_n. */
typedef struct __attribute__((packed)) {
    uint32_t severity; /* amdsmi_cper_sev_t */
    uint32_t flaw;     /* FAKE_CPER_* */
    uint32_t afid_count;
    uint64_t afids[4];
} fake_cper_kind_t;

typedef struct __attribute__((packed)) {
    char market_name[64];
    char asic_serial[32]; /* hex digits: the wrapper parses it with int(s, 16) */
    char board_serial[32];
    char vbios_version[64];
    char vbios_part[64];
    char uuid[40];
    char driver_version[32];
    char compute_partition[16]; /* empty: NOT_SUPPORTED */
    char memory_partition[16];
    uint64_t bdf;             /* amdsmi_bdf_t.as_uint */
    uint32_t lost_status;     /* non-zero: every call on this device returns it */
    uint32_t partition_id;
    uint32_t gfx_activity, umc_activity, mm_activity;
    uint32_t temp_unsupported; /* bit per temperature type */
    uint32_t clk_unsupported;  /* bit per clock type */
    uint32_t fan_supported;
    uint64_t mem_total[FAKE_NUM_MEM];
    uint64_t mem_used[FAKE_NUM_MEM];
    int64_t temp[FAKE_NUM_TEMPS];
    uint64_t socket_power;
    uint32_t current_socket_power, average_socket_power, power_limit;
    uint64_t power_cap_uw;
    uint64_t energy_acc, energy_step; /* the accumulator grows by energy_step per read */
    float energy_resolution;          /* microjoules per count */
    uint32_t clk[FAKE_NUM_CLOCKS], clk_min[FAKE_NUM_CLOCKS], clk_max[FAKE_NUM_CLOCKS];
    int64_t fan_speed, fan_max;
    uint32_t pcie_width, pcie_speed, pcie_bandwidth, pcie_max_width, pcie_max_speed;
    uint64_t pcie_replay, pcie_recovery, pcie_nak_sent, pcie_nak_received;
    uint64_t ecc_total[3]; /* correctable, uncorrectable, deferred */
    uint64_t ecc_enabled;  /* bit mask of RAS blocks */
    uint64_t ecc_block[FAKE_NUM_BLOCKS][3];
    uint16_t vcn_activity[4];
    uint16_t jpeg_activity[32];
    uint64_t xgmi_read_kb[8], xgmi_write_kb[8];
    uint16_t xgmi_link_status[8];
    uint64_t accumulation_counter;
    uint64_t residency[FAKE_NUM_RESIDENCY]; /* prochot, ppt, socket_thm, vr_thm, hbm_thm */
    uint16_t num_partition;
    uint8_t violation_active[FAKE_NUM_VIOLATIONS]; /* prochot, ppt, socket, vr, hbm, gfx_clk */
    uint32_t proc_count;
    uint32_t proc_pid[FAKE_MAX_PROCS];
    uint32_t proc_cu[FAKE_MAX_PROCS];
    uint64_t proc_vram[FAKE_MAX_PROCS];
    uint64_t proc_gtt[FAKE_MAX_PROCS];
    char proc_name[FAKE_MAX_PROCS][32];
    uint32_t pcie_interface_version; /* pcie_static: the generation the link supports */
    /* Version 2: RAS, partitions, limits. */
    uint32_t cper_unsupported;
    uint32_t cper_count; /* entries in the ring; a test appends by raising it */
    uint32_t cper_kinds_n;
    fake_cper_kind_t cper_kinds[FAKE_MAX_CPER_KINDS];
    uint64_t cper_time0; /* unix time of entry 0; entry i is i seconds later */
    uint32_t bad_page_unsupported;
    uint32_t bad_pages[3]; /* reserved, pending, unreservable */
    uint32_t bad_page_threshold;
    uint64_t power_cap_default_uw, power_cap_min_uw, power_cap_max_uw;
    int64_t temp_limit[FAKE_NUM_TEMPS][3]; /* max, critical, emergency; 0: not supported */
    uint64_t pcie_replay_roll_over, pcie_other_end_recovery;
    uint32_t xcp_set; /* 0: xcp_stats all N/A, as before gpu_metrics 1.6 */
    uint32_t xcp_busy[FAKE_NUM_XCP][FAKE_NUM_XCC];
    uint64_t xcp_acc[FAKE_NUM_XCP_ACC][FAKE_NUM_XCP][FAKE_NUM_XCC];
    /* amdsmi_get_xgmi_info: the hive (0: in none) and the node id within it. */
    uint64_t xgmi_hive_id, xgmi_node_id;
    uint32_t xgmi_unsupported; /* non-zero: NOT_SUPPORTED (a PCIe card) */
} fake_device_t;

typedef struct __attribute__((packed)) {
    uint32_t device;
    uint32_t event; /* amdsmi_evt_notification_type_t */
    char message[64];
} fake_event_t;

typedef struct __attribute__((packed)) {
    uint32_t magic, version;
    uint32_t init_status; /* what amdsmi_init returns */
    uint32_t device_count;
    /* Fault rules (../fault_rules.h): device the processor index, arg the
     * temperature / clock / memory type or RAS block; calls: device calls served. */
    fr_faults_t faults;
    uint32_t event_head;         /* producer (test) index */
    uint32_t event_tail;         /* consumer (fake) index */
    fake_event_t events[FAKE_MAX_EVENTS];
    fake_device_t devices[FAKE_MAX_DEVICES];
    /* Version 4: what amdsmi_get_lib_version reports (major, minor, release; 0: 26.5.0). */
    uint32_t lib_version[3];
} fake_state_t;

#endif
