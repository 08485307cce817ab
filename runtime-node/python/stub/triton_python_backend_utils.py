# triton_python_backend_utils for tsi: what a Triton `model.py` imports as `pb_utils`.
#
# Triton splits this module between pure-Python helpers and classes its C++ stub injects
# (Tensor, InferenceRequest, InferenceResponse, TritonError, Logger, MetricFamily, ...). tsi has no
# C++ stub, so every name is reached here (constants, Tensor and errors from tsi_pb_base.py,
# requests and responses from tsi_requests.py, logging and metrics from tsi_observability.py,
# ModelConfig from tsi_model_config.py), written against Triton's
# documented behaviour: the same class and method names, argument names and orders, defaults and
# error texts, so a model written for Triton runs unchanged. Whatever needs the server (BLS,
# sending responses, logging, metrics) goes through `_runtime`, which tsi_python_stub.py installs
# when it starts; imported on its own (a model's unit test), tensors and configs work and the
# server calls raise.
#
# This module only gathers: the base names live in tsi_pb_base.py (which the other modules build
# on), so no module of the stub imports this one back.

from tsi_pb_base import *  # noqa: F401,F403
from tsi_pb_base import (  # noqa: F401 (names the stub's own modules read through pb_utils)
    _CODE_NAME, _CODE_NUMPY, _DTYPE_CODE, _NAME_CODE, _ml_dtypes, _require_runtime,
)
from tsi_requests import (  # noqa: F401
    InferenceRequest, InferenceResponse, InferenceResponseSender, ResponseIterator, _parameters_json,
)
from tsi_observability import Logger, LogLevel, Metric, MetricFamily  # noqa: F401
from tsi_model_config import ModelConfig  # noqa: F401
