"""The PEs name different roots for one broadcast."""
import numpy as np

import pgas

pgas.init()
dest = pgas.zeros(4, np.float32)
src = pgas.zeros(4, np.float32)
pgas.broadcast(pgas.TEAM_WORLD, dest, src, pgas.my_pe() % 2)    # MISMATCH
pgas.finalize()
