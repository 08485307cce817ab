# The process tsi starts for one instance of a Python model (and, briefly, for auto-complete).
#
# It imports the model's model.py, calls initialize / execute / finalize, and talks to tsi over a
# control socket at fd 3: frames of a 4-byte little-endian length and a JSON object, small enough to
# cost microseconds. Tensors never travel on that socket. They sit in two shared-memory files tsi
# opened and unlinked before starting us: fd 4 holds what tsi writes (execute inputs, BLS results),
# which numpy arrays view in place; fd 5 is a ring we write (outputs, BLS inputs), whose consumed
# position tsi stores in its first 8 bytes. The layouts are described in runtime-node/python/shm.ts.
#
# Threads: the socket has one reader at a time, which dispatches what it reads (execute batches to
# the main thread's queue, BLS results to whoever waits for them, cancellations to request flags).
# An idle main thread is that reader, so a batch starts without a thread hop; when model code is
# about to wait for an answer (BLS, a metric value) a helper thread reads instead. `execute` runs
# on the main thread, `async def execute` on an asyncio loop of its own thread, and decoupled
# models send from any thread. Writes are serialised by one lock, under which ring space is taken
# in the order the messages leave. When tsi goes away (EOF on the socket) the process exits at
# once, whatever the model is doing.

import collections
import faulthandler
import json
import os
import queue
import select
import signal
import socket
import struct
import sys
import threading
import traceback

import numpy as np

import triton_python_backend_utils as pb

from tsi_shm import RING_HEADER, InputRegion, Ring, SharedMemory, _align

CTRL_FD, INPUT_FD, RING_FD = 3, 4, 5
ALIAS_MIN_BYTES = 64 * 1024
_LEN = struct.Struct("<I")


class BlsCall:
    """One BLS call in flight: responses queue here; a thread or a coroutine waits for them."""

    def __init__(self, rt, call_id, loop=None, future=None, decoupled=False):
        self.rt = rt
        self.id = call_id
        self.items = collections.deque()
        self.cond = threading.Condition()
        self.loop = loop
        self.future = future
        self.decoupled = decoupled

    def push(self, response, final):
        with self.cond:
            self.items.append((response, final))
            self.cond.notify()
        if self.future is not None:
            value = pb.ResponseIterator(self) if self.decoupled else response
            if self.decoupled or final:
                fut, self.future = self.future, None
                self.loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(value))

    def next(self):
        self.rt.ensure_reader()
        with self.cond:
            while not self.items:
                self.cond.wait()
            return self.items.popleft()

    def cancel(self):
        self.rt.post({"k": "bc", "id": self.id})


class Runtime:
    def __init__(self, sock, init):
        self.sock = sock
        self.lock = threading.Lock()
        self.name = init["name"]
        # Triton's stub knows itself by its instance's name (`<model>_0_0`), which its messages use.
        self.instance = init["args"]["model_instance_name"]
        self.decoupled = bool(init["decoupled"])
        # A model that may release requests with RESCHEDULE (tsi_executor waits for its async executes).
        self.iterative = bool(json.loads(init["args"]["model_config"]).get("sequence_batching", {}).get("iterative_sequence"))
        self.model_dir = init["dir"]
        self.inputs = InputRegion(INPUT_FD)
        self.ring = Ring(RING_FD, int(init["growth"]))
        import c_python_backend_utils
        c_python_backend_utils.shared_memory = SharedMemory(self.ring, self.lock)
        self.frees = collections.deque()
        self.live = {}  # (exec id, index) -> (request, block start, block end)
        self.calls = {}
        self.replies = {}
        self.next_id = 0
        self.id_lock = threading.Lock()
        self.main_queue = None
        self.initialized = False
        self.finalizing = False
        self.executor = None

    # ---- sending -------------------------------------------------------------------------------

    def _new_id(self):
        with self.id_lock:
            self.next_id += 1
            return self.next_id

    def emit(self, msg, tensors=None):
        """Sends `msg`; `tensors` go into the ring (or, when they view a live request's inputs,
        by reference) and are described in msg['t']. Frees owed to tsi ride along."""
        with self.lock:
            if tensors:
                msg["t"] = self._place(tensors, msg)
            if self.frees:
                fr = []
                while self.frees:
                    fr.append(self.frees.popleft())
                msg["fr"] = fr
            payload = json.dumps(msg, separators=(",", ":")).encode()
            self.sock.sendall(_LEN.pack(len(payload)) + payload)

    def _place(self, tensors, msg):
        descs = []
        pending = []
        total = 0
        for t in tensors:
            code = t._code
            arr = t._array
            if code == 13:
                data = pb.serialize_byte_tensor(arr)
            else:
                data = arr.reshape(-1).view(np.uint8) if arr.size else b""
                if len(data) >= ALIAS_MIN_BYTES:
                    off = self._alias(arr, len(data))
                    if off is not None:
                        descs.append([t._name, pb._CODE_NAME[code], list(arr.shape), off, len(data), 1])
                        continue
            desc = [t._name, pb._CODE_NAME[code], list(arr.shape), total, len(data), 0]
            descs.append(desc)
            pending.append((desc, data))
            total += _align(len(data))
        if total:
            base, seq = self.ring.alloc(total)
            msg["q"] = seq
            for desc, data in pending:
                desc[3] += base
                if len(data):
                    self.ring.write(desc[3], data)
        else:
            for desc, _ in pending:
                desc[3] = RING_HEADER
        return descs

    def _alias(self, arr, nbytes):
        off = self.inputs.offset_of(arr)
        if off is None:
            return None
        for _, start, end in list(self.live.values()):
            if start <= off and off + nbytes <= end:
                return off
        return None

    def post(self, msg):
        try:
            self.emit(msg)
        except OSError:
            pass

    def call(self, msg, prefix=""):
        """A request tsi answers with {k:'r', id, ...}; its error is raised here."""
        call_id = self._new_id()
        msg["id"] = call_id
        ev = threading.Event()
        self.replies[call_id] = [ev, None]
        self.ensure_reader()
        self.emit(msg)
        ev.wait()
        reply = self.replies.pop(call_id)[1]
        if "err" in reply:
            raise pb.TritonModelException(prefix + reply["err"])
        return reply

    def log(self, level, message, where):
        self.post({"k": "l", "v": level, "m": message, "w": where})

    # ---- responses -----------------------------------------------------------------------------

    @staticmethod
    def _response(request, response):
        """(message fields, tensors) of one response to `request`, outputs pruned to those asked for."""
        if response is None:
            return {}, None
        if response._error is not None:
            return {"e": [response._error._code, response._error._message]}, None
        fields = {}
        if response._parameters not in ("{}", ""):
            fields["p"] = response._parameters
        wanted = request._requested
        return fields, [t for t in response._outputs if t._name in wanted]

    def send_response(self, request, response, final):
        x, i = request._slot
        fields, tensors = self._response(request, response)
        msg = {"k": "s", "x": x, "i": i, "f": final}
        msg.update(fields)
        self.emit(msg, tensors)
        if final:
            self.live.pop((x, i), None)

    # ---- BLS -----------------------------------------------------------------------------------

    def _bls_message(self, req, call_id, stream):
        return {"k": "b", "id": call_id, "s": stream, "m": req._model_name, "v": req._model_version,
                "i": req._id, "c": _wire_correlation_id(req._correlation_id), "f": req._flags, "to": req._timeout,
                "p": req._parameters, "o": req._requested_list, "tr": getattr(req._trace, "_slot", None)}

    def _check_bls(self):
        if not self.initialized or self.finalizing:
            raise pb.TritonModelException("BLS is only supported during the 'execute' function.")

    def bls_exec(self, req, decoupled):
        self._check_bls()
        call = BlsCall(self, self._new_id(), decoupled=decoupled)
        self.calls[call.id] = call
        self.ensure_reader()
        self.emit(self._bls_message(req, call.id, decoupled), req._inputs)
        if decoupled:
            return pb.ResponseIterator(call)
        return call.next()[0]

    def bls_async_exec(self, req, decoupled):
        import asyncio
        self._check_bls()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        call = BlsCall(self, self._new_id(), loop, future, decoupled)
        self.calls[call.id] = call
        self.ensure_reader()
        self.emit(self._bls_message(req, call.id, decoupled), req._inputs)
        # Not call.future: the reader thread clears it once the answer is in, which for a fast
        # answer (an unknown model's error) can be before this line.
        return future

    def _bls_reply(self, m):
        call = self.calls.get(m["id"])
        final = bool(m["f"])
        if final:
            self.calls.pop(m["id"], None)
        tensors = []
        for name, dt, shape, off, nbytes in m.get("t", ()):
            t = self.inputs.tensor(name, dt, shape, off, nbytes)
            t._array = t._array.copy()  # the block goes back to tsi right away
            tensors.append(t)
        if "blk" in m:
            self.frees.append(m["blk"])
        if "e" in m:
            response = pb.InferenceResponse(error=pb.TritonError(m["e"][1], m["e"][0]))
        else:
            response = pb.InferenceResponse(tensors, parameters=m.get("p", "{}"))
        if call is not None:
            call.push(response, final)
        if len(self.frees) > 64 and self.lock.acquire(blocking=False):
            self.lock.release()
            self.post({"k": "fr"})

    # ---- reading: the socket has one reader at a time --------------------------------------------
    # An idle main thread reads the socket itself, so a batch starts without a hop to another thread,
    # and a model that only computes never wakes a second thread. Whoever is about to wait for an
    # answer (BLS, a metric value, an async execute) lends the socket to the helper thread first;
    # the main thread takes it back after the execute. A long execute that polls is_cancelled()
    # reads what has arrived itself (`poll`).

    def _read_once(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            # tsi is gone (or closed the socket on purpose): nothing is left to serve.
            os._exit(0)
        buf = self.buf
        buf += chunk
        pos = 0
        while len(buf) - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if len(buf) - pos - 4 < n:
                break
            self.dispatch(json.loads(bytes(buf[pos + 4:pos + 4 + n])))
            pos += 4 + n
        if pos:
            del buf[:pos]

    def start_helper(self):
        self.buf = bytearray()
        self.read_lock = threading.Lock()
        self.handoff = threading.Event()
        self.lent = False
        self.reclaim = False
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        threading.Thread(target=self._helper, name="tsi-reader", daemon=True).start()

    def _helper(self):
        try:
            while True:
                self.handoff.wait()
                self.handoff.clear()
                with self.read_lock:
                    while not self.reclaim:
                        ready = select.select([self.sock, self.wake_r], [], [])[0]
                        if self.wake_r in ready:
                            os.read(self.wake_r, 4096)
                            continue
                        self._read_once()
        except Exception:
            traceback.print_exc()
            os._exit(1)

    def ensure_reader(self):
        """Someone is about to wait for a message: make sure a thread other than the main one reads."""
        if not self.lent:
            self.lent = True
            self.reclaim = False
            self.handoff.set()

    def take_back(self):
        if self.lent:
            self.lent = False
            self.reclaim = True
            try:
                os.write(self.wake_w, b"\0")
            except BlockingIOError:
                pass  # a wake-up is already waiting in the pipe

    def poll(self):
        """Dispatches whatever has arrived, if no other thread is reading (is_cancelled in a long execute)."""
        if self.read_lock.acquire(blocking=False):
            try:
                while select.select([self.sock], [], [], 0)[0]:
                    self._read_once()
            finally:
                self.read_lock.release()

    def next_task(self):
        """The next execute (or finalize) message, reading the socket while none is queued."""
        while True:
            try:
                return self.main_queue.get_nowait()
            except queue.Empty:
                pass
            if self.read_lock.acquire(blocking=False):
                try:
                    while self.main_queue.empty():
                        self._read_once()
                finally:
                    self.read_lock.release()
            else:
                # The helper still reads (lent to a model thread): it queues what comes.
                try:
                    return self.main_queue.get(timeout=0.05)
                except queue.Empty:
                    pass

    def _batch(self, m):
        """The InferenceRequests of an execute message, built here so that a cancellation arriving
        right behind it always finds its request."""
        x = m["x"]
        reqs = []
        tensor = self.inputs.tensor
        for i, (rid, corr, flags, timeout, params, outs, block, descs, traced) in enumerate(m["r"]):
            if isinstance(corr, dict):
                corr = int(corr["u"])  # a uint64 past 2^53 (services.ts wireCorrelationId)
            req = pb.InferenceRequest._incoming((x, i), rid, corr, flags, timeout, params, outs, [tensor(*d) for d in descs])
            if traced:
                # OpenTelemetry mode sends the model span's context (Triton's get_context()); Triton mode none.
                req._trace = pb.InferenceTrace(traced if isinstance(traced, str) else None)
                req._trace._slot = (x, i)
            self.live[(x, i)] = (req, block[0], block[1])
            reqs.append(req)
        return reqs

    def dispatch(self, m):
        k = m["k"]
        if k == "x":
            try:
                m["reqs"] = self._batch(m)
            except Exception:
                m["bad"] = traceback.format_exc()
            self.main_queue.put(m)
        elif k == "fin":
            self.main_queue.put(m)
        elif k == "b":
            self._bls_reply(m)
        elif k == "c":
            entry = self.live.get((m["x"], m["i"]))
            if entry is not None:
                entry[0]._cancelled = True
        elif k == "rdy":
            # Off the reader and the main thread: a readiness check may run while execute does.
            threading.Thread(target=self.executor.is_ready, args=(m["id"],), name="tsi-is-ready", daemon=True).start()
        elif k == "r":
            slot = self.replies.get(m["id"])
            if slot is not None:
                slot[1] = m
                slot[0].set()


def read_one(sock):
    """The first frame, read before the reader thread exists."""
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + _LEN.unpack_from(buf, 0)[0]:
        chunk = sock.recv(1 << 16)
        if not chunk:
            os._exit(0)
        buf += chunk
    return json.loads(buf[4:4 + _LEN.unpack_from(buf, 0)[0]])


def _wire_correlation_id(c):
    """An int past 2^53 goes as {"u": decimal}: tsi reads JSON numbers as doubles."""
    if isinstance(c, int) and not isinstance(c, bool) and c > (1 << 53) - 1:
        return {"u": str(c)}
    return c


def send_plain(sock, msg):
    payload = json.dumps(msg).encode()
    sock.sendall(_LEN.pack(len(payload)) + payload)


def auto_complete(sock, msg):
    from tsi_executor import import_model
    cls = import_model(msg)
    config = pb.ModelConfig(msg["config"])
    if hasattr(cls, "auto_complete_config"):
        config = cls.auto_complete_config(config)
    if not isinstance(config, pb.ModelConfig):
        raise pb.TritonModelException(
            "auto_complete_config function in model '%s' must return a valid pb.ModelConfig object." % msg["name"])
    send_plain(sock, {"k": "ac", "config": json.dumps(config._model_config)})


def embedded_look():
    """What model code sees of the interpreter is what Triton's embedded one shows: an empty argument
    list (`unittest.main()` inside execute then parses nothing) and a `__main__` without the stub's
    globals. The stub's own functions keep their globals; only the module table changes."""
    import types
    sys.argv = [""]
    sys.modules["__main__"] = types.ModuleType("__main__")


def main():
    embedded_look()
    # Like Triton's stub, the process lives through SIGINT and SIGTERM: a Ctrl-C or `kill` of the server's
    # process group reaches it too, yet it must stay to run finalize() when tsi unloads the model (it
    # exits when tsi closes its socket). A handler, not SIG_IGN, so programs the model starts get the defaults.
    import signal
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    # A crash in native code (SIGSEGV, SIGABRT) then leaves its Python stack on stderr, which tsi
    # quotes in the error the in-flight requests get.
    faulthandler.enable()
    sock = socket.socket(fileno=CTRL_FD)
    send_plain(sock, {"k": "hello", "pid": os.getpid(), "python": sys.version.split()[0], "numpy": np.__version__})
    first = read_one(sock)
    rt = None
    try:
        if first["k"] == "ac":
            auto_complete(sock, first)
            return
        from tsi_executor import serve
        rt = Runtime(sock, first)
        serve(rt, first)
    except BaseException:
        msg = {"k": "ierr", "m": traceback.format_exc()}
        if rt is not None:
            rt.post(msg)
        else:
            send_plain(sock, msg)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
