"""One PE sums where the others take the maximum."""
import numpy as np

import pgas

pgas.init()
dest = pgas.zeros(4, np.int32)
src = pgas.full(4, 1, np.int32)
pgas.reduce(pgas.TEAM_WORLD, dest, src, "sum" if pgas.my_pe() == 0 else "max")    # MISMATCH
pgas.finalize()
