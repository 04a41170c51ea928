"""What every benchmark shares: a description of the machine, JSON results, tables, timing.

Benchmarks report throughput as a ratio to a baseline measured in the same run
(machines here are shared and noisy, so absolute numbers drift between runs);
the machine description written beside the figures says what they were measured on.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Final

CPUINFO_PATH: Final = Path("/proc/cpuinfo")
MEMINFO_PATH: Final = Path("/proc/meminfo")
#: Packages whose versions every benchmark records.
BASE_PACKAGES: Final = ("numpy",)
UNKNOWN: Final = "unknown"
KIB_PER_GIB: Final = 1024 * 1024
JSON_INDENT: Final = 2
COLUMN_GAP: Final = "  "


class BenchmarkError(Exception):
    """A benchmark cannot run as asked; the message names the option or step at fault."""


# ---- the machine ------------------------------------------------------------------------


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _memory_total_gib() -> float | None:
    for line in _read_text(MEMINFO_PATH).splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / KIB_PER_GIB, 1)
    return None


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return UNKNOWN


def describe_machine(packages: Sequence[str] = ()) -> dict[str, Any]:
    """CPU, cores, memory, load, OS, Python and package versions, and the date (UTC)."""
    cpu = _cpuinfo_fields(_read_text(CPUINFO_PATH))
    flags = cpu.get("flags", "").split()
    try:
        usable_cpus: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        usable_cpus = os.cpu_count()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu.get("model name", platform.processor() or UNKNOWN),
        "cpu_family_model": f"{cpu.get('cpu family', '?')}/{cpu.get('model', '?')}",
        "virtualised": "hypervisor" in flags,
        "avx512": "avx512f" in flags,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable_cpus,
        "memory_total_gib": _memory_total_gib(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": {name: package_version(name) for name in (*BASE_PACKAGES, *packages)},
    }


def machine_summary(machine: Mapping[str, Any]) -> str:
    """One line for the top of a report."""
    packages = ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    virtual = " (virtual machine)" if machine["virtualised"] else ""
    return (
        f"{machine['cpu_model']}{virtual}, {machine['usable_cpus']} usable CPUs, "
        f"{machine['memory_total_gib']} GiB, load {machine['load_average_1m']}; "
        f"Python {machine['python']}, {packages}; {machine['date']}"
    )


# ---- results -------------------------------------------------------------------------------


def write_json(path: Path, payload: Mapping[str, Any]) -> Path:
    """Write `payload` as indented JSON, atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(payload, indent=JSON_INDENT) + "\n", encoding="utf-8")
    os.replace(temporary, path)
    return path


@dataclass(frozen=True)
class Column:
    """A table column: the row key it shows, its header, and a format spec for numbers."""

    key: str
    header: str = ""
    number_format: str = ",.0f"

    @property
    def title(self) -> str:
        return self.header or self.key


def _cell(value: Any, column: Column) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return format(value, column.number_format)
    return str(value)


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """Rows as aligned text: numbers to the right, everything else to the left."""
    cells = [[_cell(row.get(c.key), c) for c in columns] for row in rows]
    widths = [max([len(c.title), *(len(line[i]) for line in cells)]) for i, c in enumerate(columns)]
    numeric = [any(isinstance(row.get(c.key), int | float) for row in rows) for c in columns]

    def line(values: Sequence[str]) -> str:
        return COLUMN_GAP.join(
            value.rjust(width) if right else value.ljust(width)
            for value, width, right in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line([c.title for c in columns]), line(["-" * w for w in widths])]
    out += [line(values) for values in cells]
    return "\n".join(out)


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> None:
    print(format_table(rows, columns))


# ---- options and timing ------------------------------------------------------------------


def parse_positive_ints(text: str, option: str) -> list[int]:
    """'10000,100000' -> [10000, 100000]; anything else is refused naming `option`."""
    values: list[int] = []
    for part in text.split(","):
        try:
            value = int(part.strip().replace("_", ""))
        except ValueError:
            raise BenchmarkError(f"{option}: {part.strip()!r} is not an integer") from None
        if value < 1:
            raise BenchmarkError(f"{option}: {value} must be >= 1")
        values.append(value)
    if not values:
        raise BenchmarkError(f"{option}: no values given")
    return values


@dataclass
class Elapsed:
    seconds: float = 0.0


@contextmanager
def stopwatch() -> Iterator[Elapsed]:
    """`with stopwatch() as t: ...` then `t.seconds` (monotonic, high resolution)."""
    elapsed = Elapsed()
    started = time.perf_counter()
    try:
        yield elapsed
    finally:
        elapsed.seconds = time.perf_counter() - started
