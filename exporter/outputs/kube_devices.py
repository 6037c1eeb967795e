"""Which DRA device a bad GPU is: this node's ResourceSlices, listed by the writer itself.

A rule selects its device by the (driver, pool, device) the node's DRA driver
published in a ResourceSlice; the verdict names the device by uuid. The writer lists
``resource.k8s.io/v1`` ResourceSlices of this node (a field selector on
``spec.nodeName``) only when a bad device has no rule yet and the last listing does
not name it, and again at most every :data:`RELIST_SECONDS` while one stays
unresolved: a node without failures never lists. The mapping is
:meth:`exporter.enrich.dra.DraIndex.resolve` (by uuid, else by the one DRA device on
the device's PCI function), the same as the workload source's DRA attribution,
whether or not that is enabled.

The same listing gives the node's pools (:meth:`DeviceRefs.pools`): which devices each
(driver, pool) publishes, and whether every slice of its newest generation was listed
(``resourceSliceCount``), so that a pool-wide rule is chosen only for a pool whose
every device is known.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

from exporter.enrich.dra import DraDevice, DraIndex
from exporter.outputs.kube_scope import Pool

SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
# While a bad device is not in the listing, the listing is asked again this often (a
# DRA driver publishing late); a listing that failed waits as long.
RELIST_SECONDS = 120.0

# () -> the items of this node's ResourceSliceList (raises KubeError when there is none).
Lister = Callable[[], list[Any]]


def slices_path(node: str) -> str:
    """The request path listing ``node``'s ResourceSlices."""
    return f"{SLICES_PATH}?fieldSelector={quote(f'spec.nodeName={node}')}"


class DeviceRefs:
    """The last ResourceSlice listing of this node, as an index, and when to list again."""

    def __init__(self, relist_seconds: float = RELIST_SECONDS) -> None:
        self.relist_seconds = relist_seconds
        self.index: DraIndex | None = None
        self.listed_at: float | None = None  # of the last attempt, answered or not
        self.state = "not_listed"  # not_listed, ok, or the last failure's reason
        self._complete: dict[tuple[str, str], bool] = {}

    def resolve(
        self,
        uuids: Iterable[str],
        pci: Mapping[str, str],
        now: float,
        lister: Lister,
    ) -> dict[str, DraDevice]:
        """The DRA device of each of ``uuids`` the slices name; lists when due.

        ``pci`` is each device's PCI bus address as its device source reports it
        (for drivers that publish no uuid). A failing listing raises, after the
        devices already known were looked up.
        """
        wanted = list(uuids)
        found = self.lookup(wanted, pci)
        due = self.listed_at is None or now - self.listed_at >= self.relist_seconds
        if len(found) == len(wanted) or not due:
            return found
        self.listed_at = now  # also when it fails: a refusing server is asked again later
        try:
            items = lister()
        except Exception as exc:  # KubeError: its reason, shown in /status
            self.state = str(getattr(exc, "reason", self.state))
            raise
        self.index, _skipped = DraIndex.from_slices(items)
        self._complete = _complete(items)
        self.state = "ok"
        return self.lookup(wanted, pci)

    def lookup(self, uuids: Iterable[str], pci: Mapping[str, str]) -> dict[str, DraDevice]:
        """The DRA device of each of ``uuids`` the last listing names (no request)."""
        if self.index is None:
            return {}
        out = {}
        for uuid in uuids:
            ref = self.index.resolve(uuid, pci.get(uuid, ""))
            if ref is not None:
                out[uuid] = ref
        return out

    def pools(self) -> dict[tuple[str, str], Pool]:
        """The node's pools by (driver, pool), as the last listing showed them."""
        if self.index is None:
            return {}
        grouped: dict[tuple[str, str], list[Any]] = {}
        for ref, dev in sorted(self.index.devices.items()):
            grouped.setdefault((ref.driver, ref.pool), []).append(dev)
        return {
            key: Pool(key[0], key[1], tuple(devs), self._complete.get(key, False))
            for key, devs in grouped.items()
        }

    def status(self) -> dict[str, Any]:
        """The listing's state for /status."""
        return {
            "state": self.state,
            "devices": len(self.index) if self.index is not None else None,
            "listed_at": self.listed_at,
        }


def _complete(items: Iterable[Any]) -> dict[tuple[str, str], bool]:
    """Per (driver, pool): whether the listing holds every slice of its newest generation."""
    seen: dict[tuple[str, str], dict[int, list[int]]] = {}
    for item in items:
        spec = item.get("spec") if isinstance(item, dict) else None
        pool = spec.get("pool") if isinstance(spec, dict) else None
        if not isinstance(pool, dict) or not isinstance(spec, dict):
            continue
        driver, name = spec.get("driver"), pool.get("name")
        generation, count = pool.get("generation", 0), pool.get("resourceSliceCount", 1)
        if not isinstance(driver, str) or not isinstance(name, str):
            continue
        generation = generation if isinstance(generation, int) else 0
        count = count if isinstance(count, int) else 0
        seen.setdefault((driver, name), {}).setdefault(generation, []).append(count)
    out = {}
    for key, generations in seen.items():
        counts = generations[max(generations)]
        # Every slice says how many the pool has; all must agree and all be here.
        out[key] = len(set(counts)) == 1 and counts[0] == len(counts)
    return out
