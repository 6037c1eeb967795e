"""The cost of checking enumerated label values in store.validate, printed as JSON. Run by hand:

    .venv/bin/python bench/label_values.py [--devices 16] [--polls 2000]

validate() runs on every poll of every source. This validates the readings of every
device family of ``--devices`` GPUs (each enumerated label holding a listed value)
against the catalog as shipped and against the same catalog with its enumerations
removed, interleaved in rounds (bench/_common.cpu_min), and prints both per call
and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import cpu_min
from exporter.catalog import CATALOG, Kind
from exporter.model import Reading
from exporter.store import validate


def device_readings(devices: int) -> list[Reading]:
    """One reading per device family and device, enumerated labels at a listed value."""
    out = []
    for index in range(devices):
        for row in CATALOG.values():
            if row.labels[:2] != ("device", "uuid") or row.kind is Kind.HISTOGRAM:
                continue
            ident = {"device": str(index), "uuid": f"GPU-{index}"}
            labels = tuple(
                ident.get(label) or row.values.get(label, ("x",))[0] for label in row.labels
            )
            out.append(Reading(row.name, labels, 1.0))
    return out


def main() -> None:
    """Print the per-call CPU time of validate with and without enumerations."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--polls", type=int, default=2000)
    args = parser.parse_args()
    readings = device_readings(args.devices)
    plain = {name: dataclasses.replace(row, values={}) for name, row in CATALOG.items()}
    with_values, without = cpu_min(
        [
            lambda: validate(readings, CATALOG, strict=False),
            lambda: validate(readings, plain, strict=False),
        ],
        args.polls,
    )
    print(
        json.dumps(
            {
                "readings": len(readings),
                "validate_us": round(with_values * 1e6, 1),
                "validate_without_enumerations_us": round(without * 1e6, 1),
                "ratio": round(with_values / without, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
