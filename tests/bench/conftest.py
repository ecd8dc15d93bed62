"""The bench package lives at the repository root, which plain ``pytest`` does not put on sys.path."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
