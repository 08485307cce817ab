# The base of triton_python_backend_utils (pb_utils): constants, dtype tables, the byte-tensor
# helpers, Tensor, TritonError, TritonModelException and the `_runtime` handle that
# tsi_python_stub.py installs when it starts. tsi_requests.py and tsi_observability.py build on
# these names, and triton_python_backend_utils.py gathers all of them for models, so this module
# imports none of theirs (tsi_dlpack only, lazily, and it imports nothing of ours): the arrows run
# one way. Whatever needs the server (BLS, sending responses, logging, metrics) goes through
# `_runtime`; imported on its own (a model's unit test), tensors and configs work and the server
# calls raise.
#
# Standard library and numpy only (numpy 1.x and 2.x); ml_dtypes is used for BF16 when importable.

import base64
import struct

import numpy as np

try:  # BF16 has no numpy dtype; ml_dtypes provides one where installed.
    import ml_dtypes as _ml_dtypes
except Exception:  # pragma: no cover - depends on the environment
    _ml_dtypes = None

# The stub's connection to tsi (set by tsi_python_stub.py).
_runtime = None

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 1

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType numbers, their wire names, and the numpy dtype that carries each.
_CODE_NAME = {1: "BOOL", 2: "UINT8", 3: "UINT16", 4: "UINT32", 5: "UINT64", 6: "INT8", 7: "INT16",
              8: "INT32", 9: "INT64", 10: "FP16", 11: "FP32", 12: "FP64", 13: "BYTES", 14: "BF16"}
_NAME_CODE = {v: k for k, v in _CODE_NAME.items()}
_CODE_NUMPY = {1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64, 6: np.int8,
               7: np.int16, 8: np.int32, 9: np.int64, 10: np.float16, 11: np.float32, 12: np.float64,
               13: np.object_, 14: np.uint16}


def serialize_byte_tensor(input_tensor):
    """The elements of a BYTES tensor as Triton lays them out: per element a 4-byte little-endian
    length and the bytes, in C order. str elements are UTF-8 encoded; bytes pass as they are."""
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype == np.object_ or input_tensor.dtype.type in (np.bytes_, np.str_):
        parts = []
        pack = struct.Struct("<I").pack
        for item in input_tensor.reshape(-1):
            s = item if isinstance(item, bytes) else str(item).encode("utf-8")
            parts.append(pack(len(s)))
            parts.append(s)
        return b"".join(parts)
    return None


def deserialize_bytes_tensor(encoded_tensor):
    """The inverse of serialize_byte_tensor: a 1-D object array of bytes."""
    strs = []
    offset = 0
    buf = memoryview(encoded_tensor).cast("B")
    end = len(buf)
    unpack = struct.Struct("<I").unpack_from
    while offset < end:
        if offset + 4 > end:
            raise TritonModelException("Invalid bytes tensor data: incomplete length field")
        (n,) = unpack(buf, offset)
        offset += 4
        if offset + n > end:
            raise TritonModelException("Invalid bytes tensor data: string extends beyond buffer")
        strs.append(bytes(buf[offset:offset + n]))
        offset += n
    out = np.empty(len(strs), dtype=np.object_)
    out[:] = strs
    return out


def get_input_tensor_by_name(inference_request, name):
    for t in inference_request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(inference_response, name):
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


def get_input_config_by_name(model_config, name):
    for props in model_config.get("input", []):
        if props["name"] == name:
            return props
    return None


def get_output_config_by_name(model_config, name):
    for props in model_config.get("output", []):
        if props["name"] == name:
            return props
    return None


def using_decoupled_model_transaction_policy(model_config):
    if "model_transaction_policy" in model_config:
        return bool(model_config["model_transaction_policy"].get("decoupled", False))
    return False


def triton_to_numpy_type(data_type):
    if data_type == 14:
        return None if _ml_dtypes is None else _ml_dtypes.bfloat16
    return _CODE_NUMPY.get(data_type)


# numpy dtype -> TRITONSERVER_DataType, one dict lookup on the hot path (every output tensor).
_DTYPE_CODE = {np.dtype(t): code for code, t in _CODE_NUMPY.items() if code != 14}
if _ml_dtypes is not None:
    _DTYPE_CODE[np.dtype(_ml_dtypes.bfloat16)] = 14


def numpy_to_triton_type(data_type):
    try:
        dt = data_type if isinstance(data_type, np.dtype) else np.dtype(data_type)
    except TypeError:
        return None
    code = _DTYPE_CODE.get(dt)
    if code is None and dt.type == np.bytes_:
        return 13
    return code


def triton_string_to_numpy(triton_type_string):
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def get_model_dir():
    """The folder of the model's version (where model.py is)."""
    return _runtime.model_dir if _runtime is not None else None


class TritonModelException(Exception):
    """Raised by the backend, and by models to fail initialize / execute / finalize."""


class TritonError:
    """An error for one response: `InferenceResponse(error=TritonError(msg, code))`."""
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message, code=1):
        if message is None or code is None:
            raise TypeError("TritonError(message, code=TritonError.INTERNAL): message and code must not be None")
        self._message = str(message)
        self._code = int(code)

    def message(self):
        return self._message

    def code(self):
        return self._code

    def __repr__(self):
        return "TritonError(%r, %d)" % (self._message, self._code)


class PreferredMemory:
    """Accepted for compatibility: tsi's tensors always live in CPU memory."""

    def __init__(self, preferred_memory_type, preferred_device_id=0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    def __init__(self, context=None):
        self._context = context
        # The (execution, index) of the traced request this trace came from: a BLS request made with
        # `trace=request.trace()` is traced as that request's child.
        self._slot = None

    def get_context(self):
        return self._context


class Tensor:
    """A named tensor: `Tensor(name, numpy_array)`. Inputs tsi hands a model are views of shared
    memory (no copy); outputs are copied into shared memory when the response leaves."""

    __slots__ = ("_name", "_array", "_code")

    def __init__(self, name, numpy_array):
        if name is None or name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        arr = numpy_array if isinstance(numpy_array, np.ndarray) else np.asarray(numpy_array)
        code = numpy_to_triton_type(arr.dtype)
        if code is None and arr.dtype.kind == "U":
            code = 13
            arr = arr.astype(np.object_)
        if code is None:
            raise TritonModelException(
                "Tensor '%s': numpy dtype %s has no Triton datatype" % (name, arr.dtype))
        if code == 14:
            arr = arr.view(np.uint16)
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        self._name = name
        self._array = arr
        self._code = code

    @classmethod
    def _wrap(cls, name, array, code):
        t = cls.__new__(cls)
        t._name = name
        t._array = array
        t._code = code
        return t

    def name(self):
        return self._name

    def as_numpy(self):
        if self._code == 14:
            if _ml_dtypes is None:
                raise TritonModelException(
                    "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and "
                    "from_dlpack() instead (or install ml_dtypes, which gives numpy a bfloat16 dtype).")
            return self._array.view(_ml_dtypes.bfloat16)
        return self._array

    def triton_dtype(self):
        return self._code

    def shape(self):
        return list(self._array.shape)

    def is_cpu(self):
        return True

    def to_dlpack(self):
        from tsi_dlpack import DLPackError, export_capsule
        if self._code == 13:
            raise TritonModelException("DLPack does not have support for string tensors.")
        try:
            return export_capsule(self._array, bf16=self._code == 14)
        except DLPackError as e:
            raise TritonModelException(str(e)) from None

    def __dlpack__(self, stream=None):
        return self.to_dlpack()

    def __dlpack_device__(self):
        return (1, 0)

    @staticmethod
    def from_dlpack(tensor_name, dlpack_tensor):
        from tsi_dlpack import DLPackError, import_capsule
        if tensor_name is None or tensor_name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        try:
            array, bf16 = import_capsule(dlpack_tensor)
        except DLPackError as e:
            raise TritonModelException(str(e)) from None
        return Tensor._wrap(tensor_name, array, 14 if bf16 else numpy_to_triton_type(array.dtype))

    def __repr__(self):
        return "Tensor(%r, %s, %s)" % (self._name, _CODE_NAME.get(self._code), list(self._array.shape))


def load_model(model_name, config="", files=None):
    """Loads (or reloads) a model as the repository API's load does: `config` is JSON text, `files`
    maps "file:<version>/<name>" to bytes. Returns once the load has finished; raises if it failed."""
    msg = {"k": "lm", "model": model_name, "config": config or ""}
    if files:
        msg["files"] = {k: base64.b64encode(v).decode("ascii") for k, v in files.items()}
    _require_runtime().call(msg)


def unload_model(model_name, unload_dependents=False):
    """Starts unloading a model, as the repository API's unload does; returns without waiting for it
    (as Triton's), so a model may unload itself."""
    _require_runtime().call({"k": "um", "model": model_name, "dependents": bool(unload_dependents)})


def is_model_ready(model_name, model_version=""):
    return bool(_require_runtime().call({"k": "imr", "model": model_name, "version": str(model_version)})["v"])


def _require_runtime():
    if _runtime is None:
        raise TritonModelException("this call needs the tsi Python backend (triton_python_backend_utils was imported outside a model)")
    return _runtime
