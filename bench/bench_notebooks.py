"""Wall time of every notebook run top to bottom in a fresh kernel (target: under 3 minutes each)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 180


def main() -> None:
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
        seconds = time.perf_counter() - start
        print(f"{path.name:36} {seconds:6.1f} s  (target < {TARGET_S} s) {'OK' if seconds < TARGET_S else 'OVER'}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
