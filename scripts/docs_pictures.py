"""Draw the README's pictures from the real tool (make pictures): every number in them is measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import inspector
from inspector.present.render import pipe  # the one door to dot


def main() -> None:
    docs = ROOT / "docs"
    docs.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "inspector", "render", "sample:stateful_conv_mul", "--stage", "tfa",
                    "--rule", "state-aware-strict", "--which", "both", "--out", str(docs / "stateful-conv-mul.png")],
                   check=True, cwd=ROOT)
    comparison = inspector.compare("sample:stateful_wide_scale", variants=("off", "upstream"), steps=20)
    attribution = inspector.attribution(comparison)
    analysis = inspector.analyze("sample:stateful_wide_scale", stage="tfa", rule="off")
    graph = analysis.render("after", errors=attribution.variant("off"))
    (docs / "where-error-enters.png").write_bytes(pipe(graph, "png"))
    print("wrote", docs / "stateful-conv-mul.png", "and", docs / "where-error-enters.png")


if __name__ == "__main__":
    main()
