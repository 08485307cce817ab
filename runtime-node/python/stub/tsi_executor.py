# The model's side of the stub: importing model.py, initialize, the execute loop on the main
# thread, async execute on an asyncio loop of its own, and finalize. tsi_python_stub.py owns the
# socket and the shared memory; this file owns what Triton's Python backend promises a model:
# the order of calls, what execute may return, and the error texts when it returns something else.

import asyncio
import importlib
import os
import queue
import sys
import threading
import time
import traceback

import triton_python_backend_utils as pb
import tsi_pb_base


def import_model(init):
    """The TritonPythonModel class of `<version>.<file>`, with the version and model folders on
    sys.path, as Triton imports it (so helper modules beside model.py import as they do there)."""
    path = init["file"]
    version_dir = os.path.dirname(path)
    model_dir = os.path.dirname(version_dir)
    for p in (version_dir, model_dir):
        if p not in sys.path:
            sys.path.append(p)
    module = os.path.basename(path)
    if not module.endswith(".py"):
        raise pb.TritonModelException('Model name must end with \'.py\'. Model name is "%s".' % module)
    mod = importlib.import_module(os.path.basename(version_dir) + "." + module[:-3])
    if not hasattr(mod, "TritonPythonModel"):
        raise pb.TritonModelException("%s does not define a class named TritonPythonModel" % path)
    return mod.TritonPythonModel


def describe(exc):
    """An exception as Triton reports it: `Type: message`, then where it was raised."""
    text = "%s: %s" % (type(exc).__name__, exc)
    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.dirname(f.filename) != here][-3:]
    if frames:
        text += "\n\nAt:\n" + "\n".join("  %s(%d): %s" % (f.filename, f.lineno, f.name) for f in reversed(frames))
    return text


class Executor:
    def __init__(self, rt, model):
        self.rt = rt
        self.model = model
        self.loop = None

    def event_loop(self):
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            threading.Thread(target=self.loop.run_forever, name="tsi-asyncio", daemon=True).start()
        return self.loop

    def fail(self, x, reqs, text):
        """Every request of the batch gets `text`; their senders close so later sends raise."""
        message = "Failed to process the request(s) for model '%s', message: %s" % (self.rt.instance, text)
        for r in reqs:
            r.get_response_sender()._close()
            self.rt.live.pop(r._slot, None)
        self.rt.emit({"k": "d", "x": x, "ns": 0, "e": message})

    def execute(self, m):
        rt = self.rt
        x = m["x"]
        if "bad" in m:
            self.fail(x, [], "tsi could not read the batch: " + m["bad"])
            return
        reqs = m["reqs"]
        t0 = time.perf_counter_ns()
        try:
            try:
                ret = self.model.execute(reqs)
                if asyncio.iscoroutine(ret):
                    fut = asyncio.run_coroutine_threadsafe(ret, self.event_loop())
                    if rt.decoupled and not rt.iterative:
                        # Decoupled async executes overlap: the next batch starts while this one awaits.
                        # Not with iterative sequences: a request released with RESCHEDULE is known
                        # only once the coroutine has returned, so its run ends then.
                        fut.add_done_callback(lambda f: self.background_done(f, reqs))
                        ret = None
                    else:
                        rt.ensure_reader()
                        ret = fut.result()
            finally:
                rt.take_back()
            ns = time.perf_counter_ns() - t0
            self.finish(x, reqs, ret, ns)
        except Exception as exc:
            pb.Logger.log_error("execute() failed:\n" + traceback.format_exc())
            self.fail(x, reqs, describe(exc))

    def finish(self, x, reqs, ret, ns):
        rt = self.rt
        if ret is None:
            done = {"k": "d", "x": x, "ns": ns}
            rs = self.released_for_reschedule(reqs)
            if rs:
                done["rs"] = rs
            rt.emit(done)
            return
        if rt.decoupled:
            raise pb.TritonModelException(
                "Python model '%s' is using the decoupled mode and the execute function must return None." % rt.instance)
        if not isinstance(ret, list):
            raise pb.TritonModelException(
                "Expected a list in the execute return, found type '%s'." % type(ret))
        if len(ret) != len(reqs):
            raise pb.TritonModelException(
                "Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
                "InferenceRequest(s) size is:%d, and InferenceResponse(s) size is:%d\n" % (len(reqs), len(ret)))
        for req, resp in zip(reqs, ret):
            if resp is not None and req._release_flags == pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                raise pb.TritonModelException(
                    "Expected a None object in the execute function return list for reschduled request, "
                    "found type '%s'." % type(resp))
            if resp is not None and not isinstance(resp, pb.InferenceResponse):
                raise pb.TritonModelException(
                    "Expected an 'InferenceResponse' object in the execute function return list, found type '%s'."
                    % type(resp))
        fields = []
        tensors = []
        answered = []
        rs = self.released_for_reschedule(reqs)
        for i, (req, resp) in enumerate(zip(reqs, ret)):
            sender = req._sender
            if i in rs:
                fields.append(None)
                continue
            if resp is None:
                # The model answers this one through its response sender (now or later).
                if sender is None:
                    fields.append({"e": [1, "model '%s' returned None for a request it did not answer "
                                            "through its response sender" % rt.name]})
                    rt.live.pop(req._slot, None)
                else:
                    fields.append(None)
                continue
            if sender is not None and not sender._close():
                fields.append(None)  # already answered through the sender
                continue
            f, ts = rt._response(req, resp)
            if ts:
                f["n"] = len(ts)
                tensors.extend(ts)
            fields.append(f)
            answered.append(req._slot)
        # Outputs may view the inputs in place: the requests stay live until the message is out.
        done = {"k": "d", "x": x, "ns": ns, "r": fields}
        if rs:
            done["rs"] = rs
        rt.emit(done, tensors)
        for slot in answered:
            rt.live.pop(slot, None)

    def released_for_reschedule(self, reqs):
        """Indices of the requests the model released with RESCHEDULE: tsi runs them again as new
        requests, so these objects and their senders end here."""
        rs = [i for i, r in enumerate(reqs) if r._release_flags == pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE]
        for i in rs:
            r = reqs[i]
            if r._sender is not None:
                r._sender._close()
            self.rt.live.pop(r._slot, None)
        return rs

    def background_done(self, fut, reqs):
        exc = fut.exception()
        if exc is None:
            return
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        pb.Logger.log_error(text)
        message = "Failed to process the request(s) for model '%s', message: %s" % (self.rt.instance, describe(exc))
        for r in reqs:
            if r.get_response_sender()._close():
                self.rt.send_response(r, pb.InferenceResponse(error=pb.TritonError(message)), True)

    def is_ready(self, call_id):
        """The model's own readiness check (Triton calls `is_ready()` when a model defines one):
        a boolean, awaited when it is a coroutine; anything else, or an exception, is an error."""
        reply = {"k": "rdy", "id": call_id}
        try:
            result = self.model.is_ready()
            if asyncio.iscoroutine(result):
                result = asyncio.run_coroutine_threadsafe(result, self.event_loop()).result()
        except Exception as exc:
            reply["e"] = describe(exc)
        else:
            if isinstance(result, bool):
                reply["v"] = result
            else:
                reply["e"] = "is_ready() must return a boolean value"
        self.rt.post(reply)

    def finalize(self):
        self.rt.finalizing = True
        self.rt.ensure_reader()
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
        if hasattr(self.model, "finalize"):
            try:
                self.model.finalize()
            except Exception:
                pb.Logger.log_error("finalize() failed:\n" + traceback.format_exc())
        self.rt.emit({"k": "fin"})


def serve(rt, init):
    tsi_pb_base._runtime = rt
    rt.main_queue = queue.SimpleQueue()
    rt.start_helper()
    rt.ensure_reader()
    model = import_model(init)()
    if hasattr(model, "initialize"):
        model.initialize(init["args"])
    rt.initialized = True
    ex = rt.executor = Executor(rt, model)
    rt.emit({"k": "ready", "ir": callable(getattr(model, "is_ready", None))})
    rt.take_back()
    while True:
        m = rt.next_task()
        if m["k"] == "x":
            ex.execute(m)
        else:
            ex.finalize()
            return
