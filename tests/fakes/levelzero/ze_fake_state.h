/* Shared state of the fake libze_loader.so.1: a file both the library and the test map.
 * tests/fakes/levelzero/control.py mirrors these structs with ctypes; the library exports
 * zf_layout() so a test checks both sides agree. Every field is naturally aligned. */
#ifndef ZE_FAKE_STATE_H
#define ZE_FAKE_STATE_H
#include <stdint.h>

#include "../fault_rules.h"

#define ZF_MAX_DEV 16
#define ZF_TILES 2
#define ZF_ENGINE_TYPES 14
#define ZF_TEMP_TYPES 9
#define ZF_FREQ_DOMAINS 3
#define ZF_RAS_CATEGORIES 7
#define ZF_PORTS 4
#define ZF_MAGIC 0x5a46414bu

typedef struct {
    int32_t type;     /* ze_device_type_t: 1 GPU, 5 VPU (must be skipped) */
    int32_t lost;     /* every call answers DEVICE_LOST */
    int32_t tiles;    /* 0: one device-level set of engines/memory; 2: one per tile */
    int32_t vendor_id;
    int32_t device_id;
    int32_t pci_domain, pci_bus, pci_dev, pci_fn;
    int32_t pci_max_gen, pci_max_width;
    int32_t pci_gen, pci_width;
    int32_t have_bandwidth, have_replay;
    int32_t ecc_state;
    uint32_t reset_flags;
    int32_t mem_health;
    int32_t power_domains;          /* 0 (integrated GPU) or 1 */
    int32_t engine_mask;            /* bit per zes_engine_group_t present */
    int32_t temp_mask;              /* bit per zes_temp_sensors_t present */
    int32_t freq_mask;              /* bit per zes_freq_domain_t present */
    int32_t ras_sets;               /* 0 or 2 (correctable + uncorrectable) */
    int32_t fabric_ports;           /* 0..ZF_PORTS */
    int32_t pad0;
    uint8_t uuid[16];
    char name[256];
    char model[64];
    char serial[64];
    char driver[64];
    int64_t pci_max_bandwidth;
    uint64_t pci_rx, pci_tx, pci_replay, pci_ts;      /* advanced by the steps per call */
    uint64_t pci_rx_step, pci_tx_step, pci_ts_step;
    uint64_t mem_size[ZF_TILES], mem_free[ZF_TILES];
    uint64_t mem_read, mem_write, mem_bw_max, mem_ts;
    uint64_t mem_read_step, mem_write_step;
    uint64_t energy_uj, energy_ts_us, energy_step_uj, energy_ts_step_us;
    uint64_t engine_active[ZF_TILES][ZF_ENGINE_TYPES];
    uint64_t engine_ts[ZF_TILES][ZF_ENGINE_TYPES];
    uint64_t engine_step[ZF_TILES][ZF_ENGINE_TYPES];  /* active time added per call */
    uint64_t engine_ts_step;
    double temp[ZF_TEMP_TYPES];
    double freq_actual[ZF_FREQ_DOMAINS];
    double freq_max[ZF_FREQ_DOMAINS];
    uint32_t throttle[ZF_FREQ_DOMAINS];
    uint32_t pad1;
    uint64_t ras[2][ZF_RAS_CATEGORIES];               /* [correctable, uncorrectable] */
    int32_t port_status[ZF_PORTS];
    uint64_t port_rx[ZF_PORTS], port_tx[ZF_PORTS], port_step;
    uint64_t ras_memory[2];           /* zesRasGetStateExp MEMORY_ERRORS [correctable, uncorrectable] */
    int32_t temp_per_tile;            /* with tiles: each sensor once per tile (onSubdevice) */
    int32_t pad2;
    double temp_tile1[ZF_TEMP_TYPES]; /* tile 1's sensors when temp_per_tile (tile 0's: temp) */
} zf_device_t;

typedef struct {
    uint32_t magic;
    int32_t devices;
    int32_t init_rc;        /* zesInit's answer (0: success) */
    int32_t chatty;         /* print every call on stdout, as some builds do */
    fr_faults_t faults;     /* calls: every entry point called */
    zf_device_t dev[ZF_MAX_DEV];
} zf_state_t;

#endif
