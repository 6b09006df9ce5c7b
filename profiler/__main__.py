"""``python -m profiler profile|calibrate ...`` (the same commands ``partitura`` offers)."""

import sys

from profiler.cli import main

sys.exit(main())
