"""Where things live in the course repository (one place per concern)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"      # CUDA sources, one folder per chapter, one file per version
LABS = ROOT / "labs"            # notebooks, one folder per chapter
RESULTS = LABS / "results"      # recorded measurements, one JSON file per GPU
BOOK = ROOT / "book"


def chapter_dir(base: Path, chapter: str) -> Path:
    """The folder of chapter "03" under base (kernels/, labs/ or book/)."""
    matches = sorted(base.glob(f"{chapter}-*"))
    if not matches:
        raise FileNotFoundError(f"no chapter {chapter} under {base}")
    return matches[0]
