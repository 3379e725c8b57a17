"""PE 1 reduces its bytes as float32 where the others reduce them as float64."""
import numpy as np

import pgas

pgas.init()
dtype = np.float32 if pgas.my_pe() == 1 else np.float64
dest = pgas.zeros(32, np.uint8)
src = pgas.zeros(32, np.uint8)
pgas.reduce(pgas.TEAM_WORLD, dest.view(dtype), src.view(dtype), "sum")    # MISMATCH
pgas.finalize()
