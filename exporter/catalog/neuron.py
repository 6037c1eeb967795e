"""AWS Trainium / Inferentia families that no other vendor has (shared ones: ``device.py``).

neuron-monitor reports NeuronCores per device, and execution statistics per
runtime (one per process using the devices). Execution counts are the sums
over the node's runtimes; latency, vCPU and host memory are per runtime, by
its ``NEURON_PROCESS_TAG`` (the pid when untagged).
"""

from __future__ import annotations

from exporter.catalog import budget
from exporter.catalog.device import ID
from exporter.catalog.spec import Kind, MetricSpec
from exporter.catalog.vocabulary import (
    NEURON_ECC_MEMORIES,
    NEURON_EXECUTION_ERRORS,
    NEURON_EXECUTION_STATUSES,
)

ROWS = (
    MetricSpec(
        "accel_neuroncore_utilization_ratio",
        Kind.GAUGE,
        "Share of the last neuron-monitor period a NeuronCore was busy, 0..1; only cores in use"
        " by a runtime.",
        (*ID, "core"),
        unit="ratio",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_neuron_memory_used_bytes",
        Kind.GAUGE,
        "Device memory used by the runtimes on a Neuron device, by category (constants,"
        " model_code, model_shared_scratchpad, runtime_memory, tensors).",
        (*ID, "category"),
        unit="bytes",
        max_series=budget.DEVICE_PARTS,
    ),
    MetricSpec(
        "accel_neuron_ecc_uncorrected_errors_total",
        Kind.COUNTER,
        "Uncorrectable ECC errors of a Neuron device by memory (hbm: neuron-monitor's"
        " mem_ecc_uncorrected, sram: sram_ecc_uncorrected), since the daemon started; their sum"
        ' is accel_ecc_errors_total{type="uncorrected"}. A growth fails the device'
        " (docs/health.md).",
        (*ID, "memory"),
        otel_unit="{error}",
        values={"memory": NEURON_ECC_MEMORIES},
        max_series=budget.DEVICES,
    ),
    MetricSpec(
        "accel_neuron_runtimes",
        Kind.GAUGE,
        "Neuron runtimes (processes using Neuron devices) neuron-monitor reports.",
        otel_unit="{runtime}",
    ),
    MetricSpec(
        "accel_neuron_execution_status_total",
        Kind.COUNTER,
        "Model executions by outcome, summed over the node's runtimes, since the daemon started.",
        ("status",),
        otel_unit="{execution}",
        values={"status": NEURON_EXECUTION_STATUSES},
    ),
    MetricSpec(
        "accel_neuron_execution_errors_total",
        Kind.COUNTER,
        "Model execution errors by kind, summed over the node's runtimes, since the daemon"
        " started.",
        ("error",),
        otel_unit="{error}",
        values={"error": NEURON_EXECUTION_ERRORS},
    ),
    MetricSpec(
        "accel_neuron_execution_latency_seconds",
        Kind.GAUGE,
        "Execution latency percentile of a runtime over the last period (latency: total or"
        " device).",
        ("runtime", "latency", "percentile"),
        unit="seconds",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_neuron_runtime_vcpu_usage_ratio",
        Kind.GAUGE,
        "Host CPU used by a runtime over the last period, by mode (user, system): neuron-monitor's"
        " percentage / 100.",
        ("runtime", "mode"),
        unit="ratio",
        max_series=budget.SMALL,
    ),
    MetricSpec(
        "accel_neuron_runtime_memory_used_bytes",
        Kind.GAUGE,
        "Memory a runtime holds, by location (host, neuron_device).",
        ("runtime", "location"),
        unit="bytes",
        max_series=budget.SMALL,
    ),
)
