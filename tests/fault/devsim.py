"""devsim: many simulated devices in one Python process (fault-injection tooling).

Test tooling only, not the product. One asyncio event loop in a background thread keeps one
MQTT 3.1.1 connection per simulated device (its own minimal codec: CONNECT with a Last Will,
SUBSCRIBE, PUBLISH QoS 0/1 with PUBACK both ways, PINGREQ), so a thousand devices cost one
thread and a few MB, not a thousand paho clients.

Each device behaves like rcs-agent as far as the protocol goes (docs/mqtt.md, docs/agent.md):

- client id = entity ident, clean session off, Last Will = retained state online: false;
  on every connect it subscribes to its job and cancel topics, publishes its retained state
  (online: true) and sends its outbox again;
- a journal (in memory: this process is never killed by the fault scripts) of every job
  ident received; a new envelope is "run" once: edge_transmitted at once, then in the
  device's worker, one job at a time in arrival order, edge_started, edge_running, an
  optional work time (work_seconds; hold() stops every worker before it finishes a job
  until release()), and terminated with the response "ok:<job>";
- a repeated envelope never runs again: it is answered with the job's final report (the
  latest one while the job is still queued or running);
- a cancel drops a queued job or ends a running one: edge_error "cancelled"; a cancel for a
  job not received yet is remembered, and its envelope is answered edge_error;
- reports go through an outbox and leave it when the broker acknowledges them (PUBACK);
  after a reconnect the outbox is sent again; seq counts per job from 1;
- it reconnects with backoff (0.25 s doubling to 5 s, jittered) whenever the connection
  drops, as long as the simulator runs; given several broker ports (the nodes of a NATS
  cluster, docs/scale-out.md), device i starts on port i mod n and moves to the next port
  after every session that ended or failed, as the agent does with several --mqtt URLs;
- a SUBACK that refuses a filter (0x80: a NATS node whose JetStream could not make the
  subscription's consumer, under load or while leaders are elected) ends the session and
  the device connects again. Here it differs from the agent, which keeps the connection
  and asks for the filter again (docs/scale-out.md, "A subscription may be refused for a
  moment"); refusals are counted
  (snapshot()["suback_refused"]).

What it records, for the invariant checks of faults.py: per job, the device whose topic
carried it, how many envelopes arrived, how many times it was run (the journal makes that
at most 1: more is a bug of this simulator, and checked anyway), cancels; per device, the
distinct jobs it ran; protocol oddities (an envelope naming another device, unparseable
payloads) in errors.
"""

import asyncio
import json
import random
import struct
import threading
import time


class _Packet:
    __slots__ = ("type", "flags", "body")

    def __init__(self, type_, flags, body):
        self.type = type_
        self.flags = flags
        self.body = body


def _varint(n):
    out = bytearray()
    while True:
        b = n % 128
        n //= 128
        if n:
            b |= 128
        out.append(b)
        if not n:
            return bytes(out)


def _str(s):
    if isinstance(s, str):
        s = s.encode()
    return struct.pack("!H", len(s)) + s


def _packet(first, body):
    return bytes([first]) + _varint(len(body)) + body


async def _read_packet(reader):
    h = await reader.readexactly(1)
    mul, n = 1, 0
    for _ in range(4):
        b = (await reader.readexactly(1))[0]
        n += (b & 127) * mul
        mul *= 128
        if not b & 128:
            break
    else:
        raise ConnectionError("malformed remaining length")
    body = await reader.readexactly(n) if n else b""
    return _Packet(h[0] >> 4, h[0] & 15, body)


class _Job:
    __slots__ = ("ident", "seq", "latest", "final", "state")

    def __init__(self, ident):
        self.ident = ident
        self.seq = 0
        self.latest = None   # (topic, payload) of the latest report
        self.final = None    # (topic, payload) of the final report
        self.state = "queued"  # queued, running, done


class SimDevice:
    def __init__(self, sim, ident, tags):
        self.sim = sim
        self.ident = ident
        self.tags = list(tags)
        self.base = "rcs/v1/%s/%s" % (sim.client_root, ident)
        self.jobs = {}            # the journal: job ident -> _Job
        self.cancelled_early = set()
        self.queue = asyncio.Queue()
        self.outbox = {}          # outbox id -> (topic, payload), insertion ordered
        self.next_outbox = 0
        self.inflight = {}        # packet id -> outbox id, for the current connection
        self.pid = 0
        self.writer = None
        self.connected = asyncio.Event()
        self.ready = False
        self.connects = 0
        self.running_job = None
        self._cancel_running = None
        self.port_index = 0       # which of sim.ports the next connect tries
        self.conn_ts = 0          # the ts of this connection's state messages and will

    # -- the connection ------------------------------------------------------------------

    def _next_pid(self):
        self.pid = self.pid % 65535 + 1
        return self.pid

    def _state_payload(self, online):
        # ts: when this connection was made, as the agent does (docs/mqtt.md, "State")
        return json.dumps({"v": 1, "online": online, "tags": self.tags,
                           "agent_version": "devsim", "ts": self.conn_ts})

    def _write(self, data):
        if self.writer is not None and not self.writer.is_closing():
            self.writer.write(data)
            return True
        return False

    def _publish(self, topic, payload, qos=1, retain=False, outbox_id=None):
        if isinstance(payload, str):
            payload = payload.encode()
        flags = (qos << 1) | (1 if retain else 0)
        body = _str(topic)
        if qos:
            pid = self._next_pid()
            body += struct.pack("!H", pid)
            if outbox_id is not None:
                self.inflight[pid] = outbox_id
        body += payload
        return self._write(_packet(0x30 | flags, body))

    def _connect_packet(self):
        self.conn_ts = max(int(time.time()), self.conn_ts + 1)
        flags = 0x04 | 0x08 | 0x20  # will, will QoS 1, will retain; clean session off
        body = (_str("MQTT") + bytes([4, flags]) + struct.pack("!H", self.sim.keepalive) +
                _str(self.ident) + _str(self.base + "/state") + _str(self._state_payload(False)))
        return _packet(0x10, body)

    async def run(self):
        delay = 0.25
        while not self.sim.stopping:
            try:
                await self._session()
                delay = 0.25
            except (OSError, asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
                pass
            finally:
                self._drop()
                self.port_index = (self.port_index + 1) % len(self.sim.ports)
            if self.sim.stopping:
                return
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, 5.0)

    def _drop(self):
        if self.ready:
            self.sim._ready_count -= 1
        self.ready = False
        self.connected.clear()
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:
                pass
        self.writer = None
        self.inflight = {}

    async def _session(self):
        async with self.sim.connect_slots:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.sim.host, self.sim.ports[self.port_index]), 10)
            self.writer = writer
            writer.write(self._connect_packet())
            p = await asyncio.wait_for(_read_packet(reader), 30)
        if p.type != 2 or len(p.body) < 2 or p.body[1] != 0:
            raise ConnectionError("CONNACK refused")
        self.connects += 1
        sub = (struct.pack("!H", self._next_pid()) + _str(self.base + "/jobs/+") + b"\x01" +
               _str(self.base + "/jobs/+/cancel") + b"\x01")
        self._write(_packet(0x82, sub))
        self._publish(self.base + "/state", self._state_payload(True), qos=1, retain=True)
        for oid, (topic, payload) in list(self.outbox.items()):
            self._publish(topic, payload, outbox_id=oid)
        self.connected.set()
        last_rx = time.monotonic()
        while True:
            try:
                p = await asyncio.wait_for(_read_packet(reader), self.sim.keepalive / 2)
            except asyncio.TimeoutError:
                if time.monotonic() - last_rx > self.sim.keepalive * 1.5:
                    raise ConnectionError("keepalive timeout")
                self._write(b"\xc0\x00")
                continue
            last_rx = time.monotonic()
            if p.type == 9:  # SUBACK
                refused = [c for c in p.body[2:] if c == 0x80]
                if refused:
                    # connect again (the agent does not yet: docs/scale-out.md "Testing")
                    self.sim._note_suback_refused(self.ident, len(refused))
                    raise ConnectionError("subscription refused")
                if not self.ready:
                    self.ready = True
                    self.sim._ready_count += 1
            elif p.type == 4:  # PUBACK
                pid = struct.unpack("!H", p.body[:2])[0]
                oid = self.inflight.pop(pid, None)
                if oid is not None:
                    self.outbox.pop(oid, None)
            elif p.type == 3:
                self._on_publish(p)
            # PINGRESP and the rest: nothing to do
            if writer.is_closing():
                raise ConnectionError("closed")

    # -- messages --------------------------------------------------------------------------

    def _on_publish(self, p):
        qos = (p.flags >> 1) & 3
        tl = struct.unpack("!H", p.body[:2])[0]
        topic = p.body[2:2 + tl].decode("utf-8", "replace")
        off = 2 + tl
        pid = None
        if qos:
            pid = struct.unpack("!H", p.body[off:off + 2])[0]
            off += 2
        payload = p.body[off:]
        try:
            self._handle(topic, payload)
        finally:
            # acknowledged once journaled (handled), like the agent
            if qos == 1:
                self._write(b"\x40\x02" + struct.pack("!H", pid))
            elif qos == 2:
                self._write(b"\x50\x02" + struct.pack("!H", pid))

    def _handle(self, topic, payload):
        parts = topic.split("/")
        rec = self.sim
        if len(parts) < 6 or parts[4] != "jobs":
            rec._error("device %s: unexpected topic %s" % (self.ident, topic))
            return
        job = parts[5]
        if len(parts) == 7 and parts[6] == "cancel":
            rec._note_cancel(job, self.ident)
            j = self.jobs.get(job)
            if j is None:
                self.cancelled_early.add(job)
            elif j.state == "queued":
                j.state = "done"
                self._report(j, "edge_error", "cancelled", final=True)
            elif j.state == "running":
                self._cancel_running = job  # the worker ends it
            return
        try:
            env = json.loads(payload)
        except ValueError:
            rec._error("device %s: unparseable envelope for job %s" % (self.ident, job))
            return
        if env.get("job") != job or env.get("entity_ident") != self.ident:
            rec._error("device %s: envelope for job %s names job %r of device %r" % (
                self.ident, job, env.get("job"), env.get("entity_ident")))
            return
        rec._note_envelope(job, self.ident, env)
        j = self.jobs.get(job)
        if j is not None:
            # a repeat: never run again, answer with the final (or latest) report
            again = j.final or j.latest
            if again is not None:
                self._enqueue_outbox(*again)
            return
        j = self.jobs[job] = _Job(job)
        if job in self.cancelled_early:
            j.state = "done"
            self._report(j, "edge_error", "cancelled before it arrived", final=True)
            return
        self._report(j, "edge_transmitted")
        self.queue.put_nowait(j)

    def _enqueue_outbox(self, topic, payload):
        oid = self.next_outbox
        self.next_outbox += 1
        self.outbox[oid] = (topic, payload)
        self._publish(topic, payload, outbox_id=oid)

    def _report(self, j, status, response=None, final=False):
        j.seq += 1
        topic = "%s/jobs/%s/status" % (self.base, j.ident)
        payload = json.dumps({"v": 1, "job": j.ident, "status": status, "seq": j.seq,
                              "ts": int(time.time()), "response": response})
        j.latest = (topic, payload)
        if final:
            j.final = (topic, payload)
        self._enqueue_outbox(topic, payload)

    async def worker(self):
        while not self.sim.stopping:
            j = await self.queue.get()
            if j.state != "queued":
                continue
            j.state = "running"
            self.running_job = j
            self.sim._note_run(j.ident, self.ident)
            self._report(j, "edge_started")
            self._report(j, "edge_running", "working")
            t_end = time.monotonic() + self.sim.work_seconds
            while time.monotonic() < t_end or not self.sim.gate.is_set():
                if self._cancel_running == j.ident:
                    break
                if self.sim.gate.is_set():
                    await asyncio.sleep(min(0.05, max(0.0, t_end - time.monotonic())))
                else:
                    await asyncio.sleep(0.05)
            j.state = "done"
            self.running_job = None
            if self._cancel_running == j.ident:
                self._report(j, "edge_error", "cancelled", final=True)
            else:
                self._report(j, "terminated", "ok:" + j.ident, final=True)


class DeviceSim:
    """Simulated devices for one tenant on a broker at 127.0.0.1:port (port: one port, or a
    list of the ports of a cluster's nodes: the devices are spread over them and fail over).

    sim = DeviceSim(port, client_root, idents, tags=["fleet"]).start(timeout=120)
    ... sim.runs_of(job), sim.envelopes_of(job), sim.jobs_run_by(ident), sim.errors ...
    sim.stop()
    """

    def __init__(self, port, client_root, idents, tags=(), host="127.0.0.1", keepalive=30,
                 work_seconds=0.0, max_connecting=64):
        self.ports = list(port) if isinstance(port, (list, tuple)) else [port]
        self.port = self.ports[0]
        self.host = host
        self.client_root = client_root
        self.idents = list(idents)
        self.tags = list(tags)
        self.keepalive = keepalive
        self.work_seconds = work_seconds
        self.max_connecting = max_connecting
        self.stopping = False
        self._ready_count = 0
        self.lock = threading.Lock()
        self.envelopes = {}    # job -> count
        self.job_device = {}   # job -> entity ident of the topic that carried it
        self.runs = {}         # job -> times run
        self.device_runs = {}  # entity ident -> [jobs run, in order]
        self.cancels = {}      # job -> count
        self.errors = []
        self.first_envelope_at = {}  # job -> time.time() of its first envelope
        self.suback_refused = {}  # entity ident -> filters the broker refused (0x80)
        self.loop = None
        self.thread = None
        self.devices = []

    # -- records (called on the loop thread) ------------------------------------------------

    def _error(self, text):
        with self.lock:
            self.errors.append(text)

    def _note_envelope(self, job, ident, env):
        with self.lock:
            self.envelopes[job] = self.envelopes.get(job, 0) + 1
            self.first_envelope_at.setdefault(job, time.time())
            prev = self.job_device.setdefault(job, ident)
            if prev != ident:
                self.errors.append("job %s reached devices %s and %s" % (job, prev, ident))

    def _note_run(self, job, ident):
        with self.lock:
            self.runs[job] = self.runs.get(job, 0) + 1
            self.device_runs.setdefault(ident, []).append(job)

    def _note_suback_refused(self, ident, n):
        with self.lock:
            self.suback_refused[ident] = self.suback_refused.get(ident, 0) + n

    def _note_cancel(self, job, ident):
        with self.lock:
            self.cancels[job] = self.cancels.get(job, 0) + 1

    # -- queries (any thread) ------------------------------------------------------------

    def snapshot(self):
        with self.lock:
            return {"envelopes": dict(self.envelopes), "job_device": dict(self.job_device),
                    "runs": dict(self.runs),
                    "device_runs": {k: list(v) for k, v in self.device_runs.items()},
                    "cancels": dict(self.cancels), "errors": list(self.errors),
                    "first_envelope_at": dict(self.first_envelope_at),
                    "suback_refused": dict(self.suback_refused)}

    def envelopes_of(self, job):
        with self.lock:
            return self.envelopes.get(job, 0)

    def runs_of(self, job):
        with self.lock:
            return self.runs.get(job, 0)

    def ready_count(self):
        return self._ready_count

    def outbox_size(self):
        return sum(len(d.outbox) for d in self.devices)

    # -- life ------------------------------------------------------------------------------

    def start(self, timeout=120):
        started = threading.Event()

        def main():
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            self.gate = asyncio.Event()
            self.gate.set()
            self.connect_slots = asyncio.Semaphore(self.max_connecting)
            self.devices = [SimDevice(self, ident, self.tags) for ident in self.idents]
            for i, d in enumerate(self.devices):
                d.port_index = i % len(self.ports)
            self.tasks = []
            for d in self.devices:
                self.tasks.append(self.loop.create_task(d.run()))
                self.tasks.append(self.loop.create_task(d.worker()))
            started.set()
            try:
                self.loop.run_forever()
            finally:
                for t in self.tasks:
                    t.cancel()
                try:
                    self.loop.run_until_complete(
                        asyncio.gather(*self.tasks, return_exceptions=True))
                except Exception:
                    pass
                self.loop.close()

        self.thread = threading.Thread(target=main, name="devsim", daemon=True)
        self.thread.start()
        started.wait(30)
        deadline = time.time() + timeout
        while self._ready_count < len(self.idents):
            if time.time() > deadline:
                raise AssertionError("devsim: only %d of %d devices connected within %ds" % (
                    self._ready_count, len(self.idents), timeout))
            time.sleep(0.05)
        return self

    def hold(self):
        """Workers finish no job until release() (edge_running stays the latest report)."""
        self.loop.call_soon_threadsafe(self.gate.clear)

    def release(self):
        self.loop.call_soon_threadsafe(self.gate.set)

    def poke(self, index=0):
        """Device index publishes its (retained, online) state again: MQTT traffic for
        the coordinator, as any fleet makes all the time."""
        d = self.devices[index]
        self.loop.call_soon_threadsafe(
            lambda: d._publish(d.base + "/state", d._state_payload(True), qos=1, retain=True))

    def set_work_seconds(self, s):
        self.work_seconds = float(s)

    def stop(self):
        if self.loop is None:
            return
        self.stopping = True

        def close_all():
            for d in self.devices:
                if d.writer is not None:
                    # a clean stop: offline state, then DISCONNECT (no Last Will)
                    d._publish(d.base + "/state", d._state_payload(False), qos=0, retain=True)
                    d._write(b"\xe0\x00")
                    try:
                        d.writer.close()
                    except Exception:
                        pass
            self.loop.call_later(0.3, self.loop.stop)

        self.loop.call_soon_threadsafe(close_all)
        self.thread.join(30)
        self.loop = None
