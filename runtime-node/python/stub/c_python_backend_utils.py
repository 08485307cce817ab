# Triton's compiled half of pb_utils, for models that import it by this name. In tsi every class
# lives in triton_python_backend_utils; this module only gives them their second address, and holds
# `shared_memory` (the stub's pool, tsi_shm.SharedMemory), set once the stub has mapped it.

from triton_python_backend_utils import (  # noqa: F401
    InferenceRequest, InferenceResponse, InferenceResponseSender, InferenceTrace, Logger, Metric, MetricFamily,
    PreferredMemory, ResponseIterator, Tensor, TRITONSERVER_MEMORY_CPU, TRITONSERVER_MEMORY_GPU, TritonError,
    TritonModelException, is_model_ready, load_model, unload_model,
)

shared_memory = None
