"""Host code: put_nbi of the data, then a separate signal_op without fence or quiet (put_signal
or a fence between them would order the two); the receiver waits for the signal and reads."""
import numpy as np

import pgas

pgas.init()
data = pgas.zeros(16, np.float64)
signal = pgas.zeros(1, np.uint64)
pgas.barrier_all()
if pgas.my_pe() == 0:
    pgas.put_nbi(data, np.arange(16.0), 1)               # RACE-A
    pgas.signal_op(signal, 1, pgas.SIGNAL_SET, 1)
    pgas.quiet()
elif pgas.my_pe() == 1:
    pgas.signal_wait_until(signal, pgas.CMP_EQ, 1)
    total = data.copy_to_host().sum()                     # RACE-B
pgas.barrier_all()
pgas.free(signal)
pgas.free(data)
pgas.finalize()
