"""PE 0 calls fcollect where the others call broadcast."""
import numpy as np

import pgas

pgas.init()
n = pgas.n_pes()
dest = pgas.zeros(n, np.int64)
src = pgas.zeros(1, np.int64)
if pgas.my_pe() == 0:
    pgas.fcollect(pgas.TEAM_WORLD, dest, src)                  # MISMATCH
else:
    pgas.broadcast(pgas.TEAM_WORLD, dest[:1], src, 0)          # MISMATCH
pgas.finalize()
