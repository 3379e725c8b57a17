"""``python -m pgas.launcher``: the same as ``pgasrun``."""
import sys

from ._pgasrun import main

sys.exit(main())
