"""PE 1 exchanges twice as many elements as the others in one alltoall."""
import numpy as np

import pgas

pgas.init()
n = pgas.n_pes()
per_pe = 2 if pgas.my_pe() != 1 else 4
dest = pgas.zeros(8 * n, np.int64)
src = pgas.zeros(8 * n, np.int64)
pgas.alltoall(pgas.TEAM_WORLD, dest[:per_pe * n], src[:per_pe * n])    # MISMATCH
pgas.finalize()
