"""Checks a fusedops wheel's contents (scripts/check_wheel.sh runs it on the wheel it builds):

- the fusedops package's Python files and exactly one shared library, fusedops/libfusedops.so
  (no soname copies such as libfusedops.so.0, nothing at the wheel's root but the package and
  its .dist-info: no lib/, include/, bin/ or CMake files);
- the library's RUNPATH is $ORIGIN/../torch/lib only (the torch of the same site-packages);
- it records the torch version it was built against, and the metadata requires torch.

    python scripts/check_wheel.py dist/fusedops-*.whl
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL_RUNPATH = ["$ORIGIN/../torch/lib"]


def problems_of(wheel: Path) -> list[str]:
    found = []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = [n for n in names if n.split("/")[0].endswith(".dist-info")]
        package = [n for n in names if n not in dist_info]
        stray = [n for n in package if not n.startswith("fusedops/")]
        if stray:
            found.append(f"files outside the fusedops package: {stray}")
        libraries = [n for n in package if re.search(r"\.so(\.|$)", n)]
        if libraries != ["fusedops/libfusedops.so"]:
            found.append(f"expected one library, fusedops/libfusedops.so, got {libraries}")
        for required in ("fusedops/__init__.py", "fusedops/_library.py"):
            if required not in package:
                found.append(f"{required} is missing")
        metadata = next((n for n in dist_info if n.endswith("/METADATA")), None)
        if metadata is None or "Requires-Dist: torch==" not in archive.read(metadata).decode():
            found.append("the metadata does not require a torch version")
        if "fusedops/libfusedops.so" in libraries:
            with tempfile.TemporaryDirectory() as tmp:
                library = Path(archive.extract("fusedops/libfusedops.so", tmp))
                dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True,
                                         text=True, check=True).stdout
                match = re.search(r"\(RUNPATH\)\s+Library runpath: \[(.*)\]", dynamic)
                runpath = match.group(1).split(":") if match else []
                if runpath != WHEEL_RUNPATH or "(RPATH)" in dynamic:
                    found.append(f"RUNPATH {runpath}, expected {WHEEL_RUNPATH}")
                if b"fusedops-build-info:torch=" not in library.read_bytes():
                    found.append("the library does not record the torch it was built against")
    return found


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    wheel = Path(sys.argv[1])
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            print(f"  {info.file_size:>10}  {info.filename}")
    found = problems_of(wheel)
    for problem in found:
        print(f"check_wheel: {wheel.name}: {problem}", file=sys.stderr)
    if not found:
        print(f"check_wheel: {wheel.name}: contents and RUNPATH as expected")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
