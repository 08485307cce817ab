# pb_utils.Logger, MetricFamily and Metric: a model's log lines and custom metrics, into tsi's log
# and onto its /metrics page. Re-exported by triton_python_backend_utils, where models find them.
# Creating a family or a metric and reading a value ask tsi and wait (so its errors are raised
# here, as Triton raises them); increment/set/observe are checked here and sent without waiting.

import enum
import sys
import weakref

import tsi_pb_base as pb
from tsi_pb_base import TritonModelException, _require_runtime


_OWN_FILES = (__file__, pb.__file__)


class LogLevel(enum.IntEnum):
    """pb_utils.LogLevel: Logger.log's level is one of these, as in Triton (a plain int is refused)."""
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Logs into tsi's log, tagged with the model, the instance and the calling line."""
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message, level=LogLevel.INFO):
        # Triton's binding takes a str and a LogLevel and raises TypeError for anything else.
        if not isinstance(message, str):
            raise TypeError("Logger.log(message, level): message must be a str, got %s" % type(message).__name__)
        if not isinstance(level, LogLevel):
            raise TypeError("Logger.log(message, level): level must be a pb_utils.LogLevel, got %s" % type(level).__name__)
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename in _OWN_FILES:
            f = f.f_back
        where = "" if f is None else "%s:%d" % (f.f_code.co_filename.rsplit("/", 1)[-1], f.f_lineno)
        if pb._runtime is None:
            sys.stderr.write("%s %s\n" % (where, message))
            return
        pb._runtime.log(int(level), str(message), where)

    @staticmethod
    def log_info(message):
        Logger.log(message, Logger.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, Logger.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, Logger.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, Logger.VERBOSE)


class MetricFamily:
    """A custom metric family shown on tsi's /metrics: `MetricFamily(name, description, kind)`."""
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2
    _KINDS = {0: "COUNTER", 1: "GAUGE", 2: "HISTOGRAM"}

    def __init__(self, name, description, kind):
        if name is None or description is None or kind is None:
            raise TypeError("MetricFamily(name, description, kind): arguments must not be None")
        if kind not in MetricFamily._KINDS:
            raise TritonModelException("Error when creating MetricFamily: Unknown metric kind")
        self._name = name
        self._kind = kind
        self._id = _require_runtime().call(
            {"k": "mf", "name": name, "desc": description, "kind": MetricFamily._KINDS[kind]},
            "Error when creating MetricFamily: ")["h"]

    def Metric(self, labels=None, buckets=None):
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricFamily.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            buckets = [float(b) for b in buckets]
        elif self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        return Metric(self, {str(k): str(v) for k, v in (labels or {}).items()}, buckets)

    def __del__(self):
        rt = pb._runtime
        if rt is not None and getattr(self, "_id", None) is not None:
            rt.post({"k": "mr", "h": self._id})


class Metric:
    """One series of a MetricFamily. increment/set/observe go out without waiting; value() asks tsi."""

    def __init__(self, family, labels, buckets):
        # Weak, as in Triton: a metric does not keep its family alive, and once the family is gone
        # every operation on the metric raises (the family's own series went with it).
        self._family = weakref.ref(family)
        self._kind = family._kind
        self._id = _require_runtime().call(
            {"k": "mm", "fam": family._id, "labels": labels, "buckets": buckets},
            "Error when creating Metric: ")["h"]

    def _alive(self):
        if self._family() is None:
            raise TritonModelException("Invalid metric operation as the corresponding 'MetricFamily' has been deleted.")

    def _op(self, op, value, what):
        self._alive()
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise TritonModelException("%s: expected a number, got %r" % (what, value))
        if v != v:
            raise TritonModelException("%s: value is NaN" % what)
        return v

    def increment(self, value):
        what = "Failed to increment metric value"
        v = self._op("inc", value, what)
        if self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException(what + ": TRITONSERVER_MetricIncrement is not supported for histograms")
        if self._kind == MetricFamily.COUNTER and v < 0:
            raise TritonModelException(what + ": counters can only be incremented by non-negative values")
        pb._runtime.post({"k": "mo", "h": self._id, "op": "increment", "v": v})

    def set(self, value):
        what = "Failed to set metric value"
        v = self._op("set", value, what)
        if self._kind != MetricFamily.GAUGE:
            raise TritonModelException(what + ": TRITONSERVER_MetricSet is only supported for gauges")
        pb._runtime.post({"k": "mo", "h": self._id, "op": "set", "v": v})

    def observe(self, value):
        what = "Failed to observe metric value"
        v = self._op("observe", value, what)
        if self._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException(what + ": TRITONSERVER_MetricObserve is only supported for histograms")
        pb._runtime.post({"k": "mo", "h": self._id, "op": "observe", "v": v})

    def value(self):
        self._alive()
        if self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException(
                "Failed to get metric value: TRITONSERVER_MetricValue is not supported for histograms")
        return pb._runtime.call({"k": "mv", "h": self._id}, "Failed to get metric value: ")["v"]

    def __del__(self):
        rt = pb._runtime
        if rt is not None and getattr(self, "_id", None) is not None:
            rt.post({"k": "mr", "h": self._id})
