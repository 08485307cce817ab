# pb_utils.InferenceRequest, InferenceResponse, InferenceResponseSender and ResponseIterator: the
# requests execute() receives (and BLS requests a model builds), the responses it answers with,
# the sender of decoupled models, and the iterator over a decoupled BLS call's responses. Argument
# names, defaults, checks and error texts are Triton's. Re-exported by triton_python_backend_utils.

import json
import threading

import tsi_pb_base as pb
from tsi_pb_base import (
    TRITONSERVER_REQUEST_RELEASE_ALL, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceTrace, Tensor, TritonError, TritonModelException,
)


def _parameters_json(parameters):
    if parameters is None:
        return "{}"
    if not isinstance(parameters, dict):
        raise TritonModelException("Expect <class 'dict'>, got %s" % type(parameters))
    for k, v in parameters.items():
        if not isinstance(k, str):
            raise TritonModelException("Expect parameters keys to have type str, found type %s" % type(k))
        if not isinstance(v, (bool, int, str)):
            raise TritonModelException(
                "Expect parameters values to have type bool/int/str, found type %s" % type(v))
    return json.dumps(parameters)


class InferenceResponse:
    """`InferenceResponse(output_tensors=[...], error=None, parameters=None)`."""

    def __init__(self, output_tensors=(), error=None, parameters=None):
        # As Triton's pybind11 binding: left out, no tensors; None (or any non-list) is a TypeError.
        if not isinstance(output_tensors, (list, tuple)):
            raise TypeError("InferenceResponse(output_tensors=...) takes a list of pb_utils.Tensor, got %s" % type(output_tensors).__name__)
        tensors = list(output_tensors)
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TritonModelException("Output tensor for inference response should not be empty.")
        if error is not None and not isinstance(error, TritonError):
            raise TypeError("InferenceResponse(error=...) takes a pb_utils.TritonError, got %s" % type(error))
        self._outputs = tensors
        self._error = error
        self._parameters = parameters if isinstance(parameters, str) else _parameters_json(parameters)

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return self._parameters


class InferenceResponseSender:
    """Sends the responses of one request (decoupled models: any number, from any thread)."""

    def __init__(self, request, decoupled):
        self._request = request
        self._decoupled = decoupled
        self._lock = threading.Lock()
        self._closed = False
        self._sent = 0

    def send(self, response=None, flags=0):
        if flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL and flags != 0:
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero.")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                "Expected an 'InferenceResponse' object, found type '%s'." % type(response))
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response.")
                if response is None and final and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final before "
                        "sending a response.")
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            if final:
                self._closed = True
            self._sent += 1
        pb._runtime.send_response(self._request, response, final)

    def is_cancelled(self):
        return self._request.is_cancelled()

    def _close(self):
        with self._lock:
            was = self._closed
            self._closed = True
            return not was


def _text(what, value):
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if not isinstance(value, str):
        raise TypeError("InferenceRequest(%s=...) takes a str, got %s" % (what, type(value).__name__))
    return value


class InferenceRequest:
    """A request: one of those `execute` receives, or a BLS request a model builds to call another
    model of the server: `InferenceRequest(model_name=..., inputs=[...], requested_output_names=[...])`."""

    def __init__(self, request_id="", correlation_id=0, inputs=None, requested_output_names=None,
                 model_name=None, model_version=-1, flags=0, timeout=0, preferred_memory=None, trace=None,
                 parameters=None):
        if inputs is None or requested_output_names is None or model_name is None:
            raise TypeError("InferenceRequest(): 'model_name', 'inputs' and 'requested_output_names' are required")
        # As Triton's pybind11 binding converts them: str or bytes for strings (a BLS model may pass
        # model_name as bytes), anything else a TypeError.
        model_name = _text("model_name", model_name)
        request_id = _text("request_id", request_id)
        if correlation_id is None:
            raise TypeError("InferenceRequest(correlation_id=...) takes an int or a str, got NoneType")
        if not isinstance(correlation_id, (int, str)) or isinstance(correlation_id, bool):
            raise TritonModelException("Correlation ID must be integer or string")
        inputs = list(inputs)
        for t in inputs:
            if not isinstance(t, Tensor):
                raise TritonModelException(
                    "Input tensor for request with id '%s' and model name '%s' should not be empty."
                    % (request_id, model_name))
        names = [_text("requested_output_names", n) for n in requested_output_names]
        for n in names:
            if not n:
                raise TritonModelException(
                    "Requested output name for request with id '%s' and model name '%s' should not be empty."
                    % (request_id, model_name))
        self._id = request_id
        self._correlation_id = correlation_id
        self._inputs = inputs
        self._requested = set(names)
        self._requested_list = names
        self._model_name = model_name
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._parameters = _parameters_json(parameters)
        self._trace = trace if trace is not None else InferenceTrace()
        self._sender = None
        self._cancelled = False
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._slot = None

    @classmethod
    def _incoming(cls, slot, request_id, correlation_id, flags, timeout, parameters, requested, inputs):
        """A request tsi hands to execute (built without the BLS constructor's checks)."""
        r = cls.__new__(cls)
        r._id = request_id
        r._correlation_id = correlation_id
        r._inputs = inputs
        r._requested = set(requested)
        r._requested_list = requested
        r._model_name = pb._runtime.name if pb._runtime is not None else ""
        r._model_version = -1
        r._flags = flags
        r._timeout = timeout
        r._parameters = parameters
        r._trace = InferenceTrace()
        r._sender = None
        r._cancelled = False
        r._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        r._slot = slot
        return r

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def set_flags(self, flags):
        self._flags = int(flags)

    def timeout(self):
        return self._timeout

    def parameters(self):
        return self._parameters

    def trace(self):
        return self._trace

    def model_name(self):
        return self._model_name

    def model_version(self):
        return self._model_version

    def requested_output_names(self):
        return self._requested

    def get_response_sender(self):
        if self._sender is None:
            if self._slot is None:
                raise TritonModelException("Only requests passed to execute() have a response sender.")
            self._sender = InferenceResponseSender(self, pb._runtime.decoupled)
        return self._sender

    def is_cancelled(self):
        if not self._cancelled and pb._runtime is not None:
            pb._runtime.poll()
        return self._cancelled

    def set_release_flags(self, flags):
        # RESCHEDULE takes effect when execute returns: tsi's sequence batcher runs the request again
        # (models with `iterative_sequence`), or refuses it with Triton's text.
        self._release_flags = int(flags)

    def exec(self, decoupled=False):
        return pb._require_runtime().bls_exec(self, bool(decoupled))

    def async_exec(self, decoupled=False):
        return pb._require_runtime().bls_async_exec(self, bool(decoupled))


class ResponseIterator:
    """The responses of a BLS call on a decoupled model, in order; the last one is final (and may
    carry no outputs). Iterating again after the end replays them, as Triton's does."""

    def __init__(self, call):
        self._call = call
        self._seen = []
        self._done = False
        self._idx = 0

    def __iter__(self):
        if self._done and self._idx >= len(self._seen):
            self._idx = 0
        return self

    def __next__(self):
        if self._done:
            if self._idx < len(self._seen):
                self._idx += 1
                return self._seen[self._idx - 1]
            raise StopIteration
        response, final = self._call.next()
        self._seen.append(response)
        if final:
            self._done = True
            self._idx = len(self._seen)
        return response

    def cancel(self):
        if not self._done:
            self._call.cancel()
