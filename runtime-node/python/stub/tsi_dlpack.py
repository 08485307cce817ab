# DLPack for pb_utils.Tensor.to_dlpack() / from_dlpack(), on CPU memory.
#
# Export uses numpy's own `__dlpack__` (numpy >= 1.22). BF16, which numpy cannot carry, travels as
# its raw uint16 bits with the capsule's dtype code rewritten to kDLBfloat, so frameworks (torch,
# jax) receive a real bfloat16 tensor; BOOL (which numpy 1.x refuses to export) likewise as uint8
# bytes labelled kDLBool. Import reads the DLManagedTensor through ctypes instead of
# numpy.from_dlpack, because Triton's from_dlpack accepts bare capsules (numpy only takes objects
# with __dlpack__) and because numpy refuses bfloat16; the data is copied into a numpy array and the
# producer's deleter is called, so nothing depends on the producer's lifetime afterwards.

import ctypes

import numpy as np

_KDL_INT, _KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT, _KDL_BOOL = 0, 1, 2, 4, 6
_KDL_CPU, _KDL_CUDA_HOST = 1, 3


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# Names handed to PyCapsule_SetName must outlive the capsule: module-level constants do.
_NAME = b"dltensor"
_USED = b"used_dltensor"


class DLPackError(Exception):
    """What goes wrong here; Tensor (tsi_pb_base.py) raises it to the model as TritonModelException,
    so this module needs nothing of pb_utils."""


def _err(msg):
    return DLPackError(msg)


def export_capsule(array, bf16=False):
    """A "dltensor" capsule over `array` (which stays alive until the consumer releases it)."""
    if not hasattr(array, "__dlpack__"):
        raise _err("to_dlpack() needs numpy >= 1.22 (this is numpy %s)" % np.__version__)
    if not array.flags.writeable:
        array = array.copy()  # numpy's DLPack refuses read-only arrays
    code = _KDL_BFLOAT if bf16 else None
    if array.dtype == np.bool_:
        # numpy 1.x cannot export bool; its bytes go out as uint8 labelled kDLBool (as numpy 2 does).
        array, code = array.view(np.uint8), _KDL_BOOL
    capsule = array.__dlpack__()
    if code is not None:
        ptr = _api.PyCapsule_GetPointer(capsule, _NAME)
        _DLManagedTensor.from_address(ptr).dl_tensor.dtype.code = code
    return capsule


_NUMPY_OF = {
    (_KDL_INT, 8): np.int8, (_KDL_INT, 16): np.int16, (_KDL_INT, 32): np.int32, (_KDL_INT, 64): np.int64,
    (_KDL_UINT, 8): np.uint8, (_KDL_UINT, 16): np.uint16, (_KDL_UINT, 32): np.uint32, (_KDL_UINT, 64): np.uint64,
    (_KDL_FLOAT, 16): np.float16, (_KDL_FLOAT, 32): np.float32, (_KDL_FLOAT, 64): np.float64,
    (_KDL_BOOL, 8): np.bool_, (_KDL_BFLOAT, 16): np.uint16,
}


def import_capsule(obj):
    """(numpy array copy, is_bf16) from a DLPack capsule or an object with __dlpack__."""
    capsule = obj
    if type(obj).__name__ != "PyCapsule":
        if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
            raise _err("Provided tensor is not supported. Tensor must be a DLPack capsule or have "
                       "`__dlpack__` and `__dlpack_device__` attributes")
        device_type = obj.__dlpack_device__()[0]
        if device_type not in (_KDL_CPU, _KDL_CUDA_HOST):
            raise _err("DLPack capsule passed pointer to memory allocated on GPU device, when GPU is not available")
        capsule = obj.__dlpack__()
    if not _api.PyCapsule_IsValid(capsule, _NAME):
        raise _err("from_dlpack() takes a 'dltensor' capsule that was not consumed before")
    ptr = _api.PyCapsule_GetPointer(capsule, _NAME)
    managed = _DLManagedTensor.from_address(ptr)
    t = managed.dl_tensor
    if t.device.device_type not in (_KDL_CPU, _KDL_CUDA_HOST):
        raise _err("DLPack capsule passed pointer to memory allocated on GPU device, when GPU is not available")
    key = (t.dtype.code, t.dtype.bits)
    if key not in _NUMPY_OF or t.dtype.lanes != 1:
        raise _err("DLPack dtype (code %d, bits %d, lanes %d) has no Triton datatype"
                   % (t.dtype.code, t.dtype.bits, t.dtype.lanes))
    dtype = np.dtype(_NUMPY_OF[key])
    shape = [t.shape[i] for i in range(t.ndim)]
    if t.strides:
        expected = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and t.strides[i] != expected:
                raise _err("DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored "
                           "in C-Order are supported.")
            expected *= shape[i]
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dtype.itemsize
    if nbytes > 0:
        raw = ctypes.string_at(t.data + t.byte_offset, nbytes)
        array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    else:
        array = np.empty(shape, dtype=dtype)
    # Consumed: the producer's memory is released now (we hold a copy), and the capsule is renamed so
    # its own destructor does not release it again.
    _api.PyCapsule_SetName(capsule, _USED)
    if managed.deleter:
        _DELETER(managed.deleter)(ptr)
    return array, key == (_KDL_BFLOAT, 16)
