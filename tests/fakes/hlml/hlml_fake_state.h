/* Shared state of the fake libhlml.so: a file both the library and the test map.
 * tests/fakes/hlml/control.py mirrors it with ctypes; hf_layout() lets a test check both
 * sides agree. Every field is naturally aligned. */
#ifndef HLML_FAKE_STATE_H
#define HLML_FAKE_STATE_H
#include <stdint.h>

#include "../fault_rules.h"

#define HF_MAX_DEV 16
#define HF_SENSORS 6
#define HF_NIC_STATS 4
#define HF_MAGIC 0x48464b31u

typedef struct {
    int32_t lost;                 /* every call answers AIP_IS_LOST */
    int32_t sensor_mask;          /* bit per hlml_temperature_sensors_t served */
    uint32_t util_aip, util_memory;
    uint32_t power_mw, power_limit_mw;
    uint32_t temp[HF_SENSORS];
    uint32_t clock_mhz, clock_max_mhz;
    uint32_t pcie_gen, pcie_width, pcie_replay;
    uint32_t replaced_rows[2];
    uint32_t rows_pending;
    uint32_t pci_bus;
    uint64_t mem_total, mem_used, mem_free;
    uint64_t energy_mj;
    int64_t ecc[2][2];            /* [corrected, uncorrected][volatile, aggregate] */
    uint64_t throttle;
    uint64_t violation_ns[2];     /* [power, thermal] */
    uint64_t port_mask[2];        /* NIC ports present */
    uint64_t port_up[2];          /* NIC ports whose link is up */
    uint64_t nic_stat[HF_NIC_STATS];  /* port p reports nic_stat[k] + p */
    char name[32];
    char serial[32];
    char uuid[64];
    char bus_id[32];
} hf_device_t;

typedef struct {
    uint32_t magic;
    int32_t devices;
    int32_t init_rc;
    int32_t chatty;               /* print every call on stdout */
    fr_faults_t faults;           /* calls: every entry point called after init */
    char driver_version[64];
    hf_device_t dev[HF_MAX_DEV];
} hf_state_t;

#endif
