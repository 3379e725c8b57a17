"""PE 0 allocates its two arrays in the other order: each would land on another PE's other array."""
import numpy as np

import pgas

pgas.init()
if pgas.my_pe() == 0:
    a = pgas.zeros(100, np.float64)                # MISMATCH
    b = pgas.zeros(10, np.int32)
else:
    b = pgas.zeros(10, np.int32)                   # MISMATCH
    a = pgas.zeros(100, np.float64)
pgas.finalize()
