"""Host code: a symmetric source changed before the quiet that completes its put_nbi."""
import numpy as np

import pgas

pgas.init()
dest = pgas.zeros(8, np.int32)
src = pgas.full(8, pgas.my_pe(), np.int32)
pgas.barrier_all()
pgas.put_nbi(dest, src, (pgas.my_pe() + 1) % pgas.n_pes())   # RACE-A
src[0] = -1                                                    # RACE-B
pgas.quiet()
pgas.barrier_all()
pgas.free(src)
pgas.free(dest)
pgas.finalize()
