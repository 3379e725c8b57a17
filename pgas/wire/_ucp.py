"""The parts of UCX's UCP API (1.x) that pgas's wire uses, through ctypes, callable from
numba nopython code (``nogil`` functions and ``cfunc`` callbacks) as well as from Python.

Native code calls them by symbol (module ``_native``: numba ``ExternalFunction`` declarations
of the ``pgas_``-prefixed names that ``load`` registers with LLVM's symbol table), not by
address, so numba can cache that code on disk: it would otherwise compile at every PE's
start (seconds).

UCX is already in every PE: the mpich wheel's ch4:ucx device links ``libucp.so.0``, so
once mpi4py has loaded MPI the library resolves to the copy MPI uses. Layouts and values
follow ``ucp.h``/``ucp_def.h`` of UCX 1.20 (the ABI is stable across 1.x). Every pointer
or handle is declared as a 64-bit integer, so numba code passes plain ``int64`` values
(``array.ctypes.data``, handles kept in int64 arrays). A ``ucs_status_ptr_t`` result is
then 0 (done at once), a negative status (an error) or a request handle (positive).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import os
import sys

from ..core._errors import PgasError

__all__ = ["load", "loads", "natives", "libc", "register_symbol", "request_params", "UCS_OK", "UCS_INPROGRESS",
           "UCS_ERR_BUSY"]

API_MAJOR, API_MINOR = 1, 12        # the oldest API whose structs hold every field set here

UCS_OK, UCS_INPROGRESS, UCS_ERR_BUSY = 0, 1, -15
UCS_THREAD_MODE_MULTI = 2

PARAM_FIELD_FEATURES, PARAM_FIELD_REQUEST_SIZE, PARAM_FIELD_ESTIMATED_NUM_EPS = 1 << 0, 1 << 1, 1 << 6
FEATURE_AM, FEATURE_WAKEUP, FEATURE_RMA = 1 << 6, 1 << 4, 1 << 1
WORKER_PARAM_FIELD_THREAD_MODE = 1 << 0
EP_PARAM_FIELD_REMOTE_ADDRESS, EP_PARAM_FIELD_ERR_HANDLING_MODE = 1 << 0, 1 << 1
ERR_HANDLING_MODE_NONE = 0

OP_ATTR_FIELD_CALLBACK, OP_ATTR_FIELD_USER_DATA, OP_ATTR_FIELD_FLAGS = 1 << 1, 1 << 2, 1 << 4
AM_FLAG_WHOLE_MSG = 1 << 0
AM_SEND_FLAG_REPLY, AM_SEND_FLAG_EAGER, AM_SEND_FLAG_COPY_HEADER = 1 << 0, 1 << 1, 1 << 3
AM_RECV_ATTR_FIELD_REPLY_EP, AM_RECV_ATTR_FLAG_RNDV = 1 << 0, 1 << 17
AM_HANDLER_PARAM_FIELDS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3)      # id, flags, cb, arg
MEM_MAP_PARAM_FIELD_ADDRESS, MEM_MAP_PARAM_FIELD_LENGTH = 1 << 0, 1 << 1
EP_ATTR_FIELD_TRANSPORTS = 1 << 3

_u64, _vp, _int, _uint, _size = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t


class Params(ctypes.Structure):             # ucp_params_t
    _fields_ = [("field_mask", _u64), ("features", _u64), ("request_size", _size), ("request_init", _vp),
                ("request_cleanup", _vp), ("tag_sender_mask", _u64), ("mt_workers_shared", _int),
                ("estimated_num_eps", _size), ("estimated_num_ppn", _size), ("name", ctypes.c_char_p),
                ("node_local_id", _size)]


class WorkerParams(ctypes.Structure):       # ucp_worker_params_t
    _fields_ = [("field_mask", _u64), ("thread_mode", _int), ("cpu_mask", ctypes.c_ulong * 16), ("events", _uint),
                ("user_data", _vp), ("event_fd", _int), ("flags", _u64), ("name", ctypes.c_char_p),
                ("am_alignment", _size), ("client_id", _u64)]


class EpParams(ctypes.Structure):           # ucp_ep_params_t
    _fields_ = [("field_mask", _u64), ("address", _vp), ("err_mode", _int), ("err_handler_cb", _vp),
                ("err_handler_arg", _vp), ("user_data", _vp), ("flags", _uint), ("sockaddr", _vp),
                ("sockaddr_len", ctypes.c_uint32), ("conn_request", _vp), ("name", ctypes.c_char_p),
                ("local_sockaddr", _vp), ("local_sockaddr_len", ctypes.c_uint32)]


class RequestParams(ctypes.Structure):      # ucp_request_param_t
    _fields_ = [("op_attr_mask", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("request", _vp), ("cb", _vp),
                ("datatype", _u64), ("user_data", _vp), ("reply_buffer", _vp), ("memory_type", _int),
                ("recv_info", _vp), ("memh", _vp)]


class AmHandlerParams(ctypes.Structure):    # ucp_am_handler_param_t
    _fields_ = [("field_mask", _u64), ("id", _uint), ("flags", ctypes.c_uint32), ("cb", _vp), ("arg", _vp)]


class MemMapParams(ctypes.Structure):      # ucp_mem_map_params_t
    _fields_ = [("field_mask", _u64), ("address", _vp), ("length", _size), ("flags", _uint), ("prot", _uint),
                ("memory_type", _int), ("exported_memh_buffer", _vp)]


class ContextAttr(ctypes.Structure):       # ucp_context_attr_t (up to its memory types)
    _fields_ = [("field_mask", _u64), ("request_size", _size), ("thread_mode", _int), ("memory_types", _u64)]


ATTR_FIELD_MEMORY_TYPES = 1 << 2
# ucs_memory_type_t, in its order: the bits of ``ContextAttr.memory_types``
MEMORY_TYPES = ("host", "cuda", "cuda-managed", "rocm", "rocm-managed")


class TransportEntry(ctypes.Structure):    # ucp_transport_entry_t
    _fields_ = [("transport_name", ctypes.c_char_p), ("device_name", ctypes.c_char_p)]


class EpAttr(ctypes.Structure):            # ucp_ep_attr_t (up to its transports)
    _fields_ = [("field_mask", _u64), ("name", ctypes.c_char * 32), ("local_sockaddr", ctypes.c_char * 128),
                ("remote_sockaddr", ctypes.c_char * 128), ("entries", _vp), ("num_entries", _uint),
                ("entry_size", _size), ("user_data", _vp)]


assert (ctypes.sizeof(MemMapParams), ctypes.sizeof(TransportEntry), EpAttr.entries.offset) == (48, 16, 296)
assert ContextAttr.memory_types.offset == 24
assert (ctypes.sizeof(Params), ctypes.sizeof(WorkerParams), ctypes.sizeof(EpParams), ctypes.sizeof(RequestParams),
        ctypes.sizeof(AmHandlerParams)) == (88, 200, 104, 72, 32)

_P = ctypes.c_int64          # pointers and handles, as numba passes them
_DECLARATIONS = {            # name: (result, arguments)
    "ucp_config_read": (_int, (_P, _P, _P)),
    "ucp_config_release": (None, (_P,)),
    "ucp_config_modify": (_int, (_P, ctypes.c_char_p, ctypes.c_char_p)),
    "ucp_init_version": (_int, (_uint, _uint, _P, _P, _P)),
    "ucp_cleanup": (None, (_P,)),
    "ucp_worker_create": (_int, (_P, _P, _P)),
    "ucp_worker_destroy": (None, (_P,)),
    "ucp_worker_get_address": (_int, (_P, _P, _P)),
    "ucp_worker_release_address": (None, (_P, _P)),
    "ucp_worker_get_efd": (_int, (_P, _P)),
    "ucp_worker_set_am_recv_handler": (_int, (_P, _P)),
    "ucp_ep_create": (_int, (_P, _P, _P)),
    "ucp_ep_close_nbx": (_P, (_P, _P)),
    "ucp_get_version_string": (ctypes.c_char_p, ()),
    "ucp_worker_progress": (_uint, (_P,)),
    "ucp_worker_arm": (_int, (_P,)),
    "ucp_worker_signal": (_int, (_P,)),
    "ucp_am_send_nbx": (_P, (_P, _uint, _P, _P, _P, _P, _P)),
    "ucp_am_recv_data_nbx": (_P, (_P, _P, _P, _P, _P)),
    "ucp_request_check_status": (_int, (_P,)),
    "ucp_request_free": (None, (_P,)),
    "ucp_mem_map": (_int, (_P, _P, _P)),
    "ucp_mem_unmap": (_int, (_P, _P)),
    "ucp_rkey_pack": (_int, (_P, _P, _P, _P)),
    "ucp_rkey_buffer_release": (None, (_P,)),
    "ucp_ep_rkey_unpack": (_int, (_P, _P, _P)),
    "ucp_rkey_destroy": (None, (_P,)),
    "ucp_put_nbx": (_P, (_P, _P, _P, _P, _P, _P)),
    "ucp_get_nbx": (_P, (_P, _P, _P, _P, _P, _P)),
    "ucp_ep_flush_nbx": (_P, (_P, _P)),
    "ucp_worker_flush_nbx": (_P, (_P, _P)),
    "ucp_ep_query": (_int, (_P, _P)),
    "ucp_context_query": (_int, (_P, _P)),
}


_LIBC = {"poll": (_int, (_P, _P, _int)), "ppoll": (_int, (_P, _P, _P, _P)), "memcpy": (_P, (_P, _P, _P)),
         "sched_yield": (_int, ()), "clock_gettime": (_int, (_int, _P)), "nanosleep": (_int, (_P, _P)),
         "malloc": (_P, (_P,)), "free": (None, (_P,))}
_NATIVE = ("ucp_worker_progress", "ucp_worker_arm", "ucp_worker_signal", "ucp_am_send_nbx", "ucp_am_recv_data_nbx",
           "ucp_request_free", "ucp_put_nbx", "ucp_get_nbx", "ucp_ep_flush_nbx", "ucp_worker_flush_nbx",
           "ucp_request_check_status", *_LIBC)     # what native code calls


def register_symbol(name: str, address: int) -> None:
    """Make the function at ``address`` callable from numba code as ``pgas_<name>`` (``_native``)."""
    import llvmlite.binding as llvm
    llvm.add_symbol(f"pgas_{name}", address)


def libc() -> dict:
    """libc's few functions the wire calls (``_LIBC``), by name, registered for native
    code (once)."""
    if not _libc:
        library = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        for name, (result, arguments) in _LIBC.items():
            function = getattr(library, name)
            function.restype, function.argtypes = result, list(arguments)
            register_symbol(name, ctypes.cast(function, ctypes.c_void_p).value)
            _libc[name] = function
    return _libc


_libc: dict = {}


def _declared(result, arguments):
    """The numba signature of a declaration (pointers and handles as int64)."""
    from numba import types
    numba_type = {_P: types.int64, _int: types.int32, _uint: types.uint32, None: types.void}
    return numba_type[result](*(numba_type[a] for a in arguments))


def natives() -> dict:
    """name -> the numba declaration of ``pgas_<name>`` (module ``_native`` holds them)."""
    from numba import types
    every = {**_DECLARATIONS, **_LIBC}
    return {name: types.ExternalFunction(f"pgas_{name}", _declared(*every[name])) for name in _NATIVE}


class Library:
    """libucp's functions as attributes (``lib.ucp_worker_progress``), and libc's few."""

    def __init__(self, cdll: ctypes.CDLL):
        for name, (result, arguments) in _DECLARATIONS.items():
            function = getattr(cdll, name)
            function.restype, function.argtypes = result, list(arguments)
            setattr(self, name, function)
        for name, function in libc().items():
            setattr(self, name, function)
        for name in _NATIVE:
            register_symbol(name, ctypes.cast(getattr(self, name), ctypes.c_void_p).value)
        self.version = self.ucp_get_version_string().decode()


_loaded: list = []


def load() -> Library:
    """libucp (the copy MPI loaded, else the one beside the mpich wheel's libmpi), once.
    PgasError saying why when there is none."""
    if not _loaded:
        importlib.import_module("mpi4py.MPI")     # loads libmpi, and with it libucp
        tried = ["libucp.so.0", os.path.join(sys.prefix, "lib", "mpich", "libucp.so.0")]
        errors = []
        for name in tried:
            try:
                _loaded.append(Library(ctypes.CDLL(name)))
                break
            except (OSError, AttributeError) as e:
                errors.append(f"{name}: {e}")
        else:
            raise PgasError("UCX's libucp cannot be loaded (" + "; ".join(errors) + "); it comes with MPICH "
                            "built with ch4:ucx (the mpich wheel)")
    return _loaded[0]


def request_params(flags: int, completion=None, user_data=None):
    """A ``ucp_request_param_t`` asking for ``flags`` (and, for a receive, calling cfunc
    ``completion`` with ``user_data``'s address: a numpy array), kept in a numpy array."""
    import numpy as np
    params = np.zeros(ctypes.sizeof(RequestParams), np.uint8)
    struct = RequestParams.from_buffer(params)
    struct.op_attr_mask, struct.flags = OP_ATTR_FIELD_FLAGS, flags
    if completion is not None:
        struct.op_attr_mask |= OP_ATTR_FIELD_CALLBACK | OP_ATTR_FIELD_USER_DATA
        struct.cb, struct.user_data = completion.address, user_data.ctypes.data
    return params


def loads() -> bool:
    """True when UCX can be loaded here (``load``)."""
    try:
        load()
    except PgasError:
        return False
    return True


def check(status: int, what: str) -> None:
    if status != UCS_OK:
        raise PgasError(f"UCX {what} failed (ucs_status_t {status})")
