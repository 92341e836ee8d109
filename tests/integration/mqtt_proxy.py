"""A TCP proxy between one MQTT 3.1.1 client and a broker, on 127.0.0.1, that can withhold
the broker's acknowledgements (PUBACK) of the client's QoS 1 publishes whose topic holds a
given part: a broker that takes some of what a client publishes and never acknowledges it,
or acknowledges it slowly, while everything else flows. Used by the integration tests;
started and stopped by them."""

import queue
import socket
import threading
import time

from rcs_harness import free_port

CONNECT, PUBLISH, PUBACK = 1, 3, 4


def _packets(buf):
    """Splits complete MQTT packets off the front of buf: ([(type, flags, body, raw)], rest)."""
    out = []
    while len(buf) >= 2:
        n, mult, i = 0, 1, 1
        while True:
            if i >= len(buf):
                return out, buf
            b = buf[i]
            n += (b & 0x7F) * mult
            mult *= 128
            i += 1
            if not b & 0x80:
                break
            if i > 4:
                raise ValueError("malformed remaining length")
        if len(buf) < i + n:
            return out, buf
        out.append((buf[0] >> 4, buf[0] & 0x0F, buf[i:i + n], buf[:i + n]))
        buf = buf[i + n:]
    return out, buf


class MqttProxy:
    """Listens on a free port (url); each connection goes on to the broker at port.
    withhold: a topic part; while set, the PUBACKs of the client's QoS 1 publishes to topics
    holding it are dropped (withheld counts them); with delay (seconds) set too, they are
    passed on in order, one each delay: a slow broker (delayed counts them).
    drop_to_clean: a topic part; the broker's publishes to topics holding it are dropped on
    the connections whose CONNECT asked for a clean session (dropped counts them).
    stall_connects: how many of the next CONNECTs are not passed on, their connections left
    open and unanswered: a broker that never answers a connect attempt (stalled counts them).
    levels: the protocol level of every CONNECT seen, in order (4: MQTT 3.1.1, 3: 3.1)."""

    def __init__(self, port):
        self.target = port
        self.port = free_port()
        self.url = "tcp://127.0.0.1:%d" % self.port
        self.withhold = None
        self.withheld = 0
        self.delay = 0.0
        self.delayed = 0
        self.drop_to_clean = None
        self.dropped = 0
        self.stall_connects = 0
        self.stalled = 0
        self.levels = []
        self.lock = threading.Lock()
        self.socks = []
        self.srv = None

    def start(self):
        self.srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", self.port))
        self.srv.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self):
        if self.srv is not None:
            try:
                self.srv.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            except OSError:
                pass
            self.srv.close()
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            except OSError:
                c.close()
                continue
            b.settimeout(None)
            pair = {"socks": (c, b), "ended": 0, "wlock": threading.Lock(),
                    "slow": queue.Queue(), "clean": False,
                    "ids": set()}  # packet ids of publishes whose PUBACK is withheld
            with self.lock:
                self.socks += [c, b]
            threading.Thread(target=self._pump, args=(c, b, True, pair), daemon=True).start()
            threading.Thread(target=self._pump, args=(b, c, False, pair), daemon=True).start()
            threading.Thread(target=self._slow, args=(c, pair), daemon=True).start()

    def _slow(self, dst, pair):
        """The delayed PUBACKs of a connection, one each delay, in order."""
        while True:
            raw = pair["slow"].get()
            if raw is None:
                return
            time.sleep(self.delay)
            try:
                with pair["wlock"]:
                    dst.sendall(raw)
            except OSError:
                return

    def _pump(self, src, dst, from_client, pair):
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                pkts, buf = _packets(buf)
                out = []
                for kind, flags, body, raw in pkts:
                    if from_client and kind == CONNECT:
                        plen = int.from_bytes(body[:2], "big")
                        if len(body) < 2 + plen + 2:
                            raise ValueError("short CONNECT")  # ends the pair, as a bad length
                        pair["clean"] = bool(body[2 + plen + 1] & 0x02)  # connect flags
                        with self.lock:
                            self.levels.append(body[2 + plen])
                            stall = self.stall_connects > 0
                            if stall:
                                self.stall_connects -= 1
                                self.stalled += 1
                        if stall:
                            continue
                    elif not from_client and kind == PUBLISH and pair["clean"] and \
                            self.drop_to_clean:
                        tlen = int.from_bytes(body[:2], "big")
                        if self.drop_to_clean in body[2:2 + tlen].decode("utf-8", "replace"):
                            with self.lock:
                                self.dropped += 1
                            continue
                    if from_client and kind == PUBLISH and (flags >> 1) & 3:
                        tlen = int.from_bytes(body[:2], "big")
                        topic = body[2:2 + tlen].decode("utf-8", "replace")
                        pid = int.from_bytes(body[2 + tlen:4 + tlen], "big")
                        with self.lock:
                            if self.withhold and self.withhold in topic:
                                pair["ids"].add(pid)
                            else:
                                pair["ids"].discard(pid)
                    elif not from_client and kind == PUBACK:
                        pid = int.from_bytes(body[:2], "big")
                        with self.lock:
                            drop = pid in pair["ids"]
                            slow = drop and self.delay > 0
                            if slow:
                                self.delayed += 1
                            elif drop:
                                self.withheld += 1
                        if slow:
                            pair["slow"].put(raw)
                        if drop:
                            continue
                    out.append(raw)
                if out:
                    with pair["wlock"]:
                        dst.sendall(b"".join(out))
        except (OSError, ValueError):
            pass
        finally:
            # the other direction's pump sees its socket shut and ends too; the second
            # to end closes both (unless stop did)
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            pair["slow"].put(None)
            with self.lock:
                pair["ended"] += 1
                if pair["ended"] == 2:
                    for s in pair["socks"]:
                        if s in self.socks:
                            self.socks.remove(s)
                            s.close()
