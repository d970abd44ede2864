"""Client workers of the peer benchmark: one producer or one consumer of one
system, each run in a process of its own (``bench/peers.py --worker KIND
PARAMS``), printing one line ``RESULT <json>``.

Workloads (the Kafka paper's section 5, 200-byte messages, one queue/topic):

  samsa_produce      ``Producer`` acks=none; batch 1: ``send()`` per message
                     (batch_size=1, linger_ms=0); batch 50: ``send_many()`` of
                     50 values (batch_size=50). Done when the broker's latest
                     offset (flushed, visible) covers every message.
  rabbitmq_produce   pika ``BlockingConnection``, persistent messages
                     (delivery_mode 2) to a durable queue, no publisher
                     confirms; "batch 50" = a transaction (tx.select, 50
                     publishes, tx.commit). Done when the queue holds them all.
  activemq_produce   stomp.py, ``persistent:true``, no receipts except on the
                     last frame (the broker handles a connection's frames in
                     order: its receipt means all are stored); "batch 50" =
                     BEGIN, 50 SENDs, COMMIT.
  *_consume          drain the queue/topic: Samsa with 200 KB fetches (about
                     900 messages per pull, CRC checks on); the peers with a
                     prefetch of 1000 and automatic acknowledgement, as in the
                     paper (RabbitMQ ignores the prefetch of an auto-ack
                     consumer: it pushes as fast as TCP takes it).

A producer publishes for at least ``seconds`` (it looks at the clock every
50 messages and stops there; N = what it sent) or ``n_max`` messages. Each
worker records (seconds since start, messages so far) about every 0.1 s for
the plots. Throughput counts 200 payload bytes per message for every system.
Must never start or stop a broker: the driver owns those.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from bench.common import (DISTINCT_VALUES, FETCH_BYTES, MESSAGE_BYTES, VALUE_SIZE,  # noqa: E402
                          random_values)

PREFETCH = 1000         # messages the peers may push ahead of the consumer
STALL_S = 30.0          # a worker gives up when nothing moves for this long
TICK_MASK = 63          # consumers look at the clock every 64 messages
STEP = 50               # producers look at the clock every 50 messages (a batch)


class Progress:
    """(seconds since start, messages so far), about every ``interval`` s."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.points: list[list[float]] = []
        self.t0 = 0.0
        self._next = 0.0

    def start(self) -> float:
        self.t0 = time.perf_counter()
        self._next = self.t0 + self.interval
        self.points = [[0.0, 0]]
        return self.t0

    def tick(self, count: int, now: float | None = None) -> None:
        if now is None:
            now = time.perf_counter()
        if now >= self._next:
            self.points.append([round(now - self.t0, 4), count])
            self._next = now + self.interval

    def finish(self, count: int, now: float | None = None) -> float:
        now = time.perf_counter() if now is None else now
        self.points.append([round(now - self.t0, 4), count])
        return now - self.t0


def _result(n: int, elapsed: float, prog: Progress, **extra) -> dict:
    out = {"n": n, "elapsed_s": elapsed, "msgs_per_s": n / elapsed if elapsed > 0 else 0.0,
           "mb_per_s": n * VALUE_SIZE / elapsed / 1e6 if elapsed > 0 else 0.0,
           "series": prog.points}
    out.update(extra)
    return out


def _chunks(values: list[bytes], size: int = STEP) -> list[list[bytes]]:
    """DISTINCT_VALUES lists of ``size`` values, reused cyclically (message k*size+j
    of the stream gets values[(k*size+j) % DISTINCT_VALUES])."""
    mask = DISTINCT_VALUES - 1
    return [[values[(k * size + j) & mask] for j in range(size)] for k in range(DISTINCT_VALUES)]


def steps(prog: Progress, n_max: int, seconds: float | None):
    """The producer loop's rhythm: yields (k, final) for step k (messages
    k*STEP .. k*STEP+STEP-1) until ``n_max`` messages or, checked before each
    step, ``seconds`` since ``prog.start()``; ``final`` marks the last step
    (the peers' producers put their completion receipt on it)."""
    clock, tick = time.perf_counter, prog.tick
    t_stop = prog.t0 + seconds if seconds else float("inf")
    last = -(-n_max // STEP) - 1
    for k in range(last + 1):
        now = clock()
        tick(k * STEP, now)
        final = k == last or now >= t_stop
        yield k, final
        if final:
            return


# ====================================================================== Samsa

def samsa_produce(p: dict) -> dict:
    from broker.client.admin import AdminClient
    from broker.client.producer import Producer, ProducerConfig
    topic, bs = p["dest"], p["batch"]
    values = _chunks(random_values())
    mask = DISTINCT_VALUES - 1
    admin = AdminClient(p["address"])
    start_offset = admin.latest_offset(topic, 0)
    producer = Producer(ProducerConfig(bootstrap=p["address"], acks="none", batch_size=bs,
                                       linger_ms=0 if bs == 1 else 5))
    producer.conn.connect()
    send, send_many, prog = producer.send, producer.send_many, Progress()
    t0 = prog.start()
    n = 0
    for k, _final in steps(prog, p["n_max"], p.get("seconds")):
        chunk = values[k & mask]
        if bs == 1:
            for v in chunk:
                send(topic, v, partition=0)
        else:
            send_many(topic, chunk, partition=0)
        n += STEP
    producer.flush()
    t_flush = time.perf_counter()
    expected_end = start_offset + n * MESSAGE_BYTES
    deadline = t_flush + p.get("timeout_s", 300)
    latest = admin.latest_offset(topic, 0)
    while latest < expected_end and time.perf_counter() < deadline:
        time.sleep(0.002)
        latest = admin.latest_offset(topic, 0)
    elapsed = prog.finish(n)
    failed = producer.failed_batches
    producer.close()
    admin.close()
    out = _result(n, elapsed, prog, flush_s=t_flush - t0, failed_batches=failed)
    if latest != expected_end:
        out["error"] = f"broker has {latest} bytes, expected {expected_end}"
    return out


def samsa_consume(p: dict) -> dict:
    from broker.client.consumer import Consumer, ConsumerConfig
    n, tp = p["n"], (p["dest"], 0)
    consumer = Consumer(ConsumerConfig(bootstrap=p["address"], fetch_max_bytes=FETCH_BYTES,
                                       check_crcs=True))
    consumer.assign([tp], start="earliest")
    count, pulls, error, prog = 0, 0, None, Progress()
    poll, tick = consumer.poll, prog.tick
    prog.start()
    while count < n:
        msgs = poll(timeout_ms=int(STALL_S * 1000))
        if not msgs:
            error = f"no message for {STALL_S:.0f} s after {count}"
            break
        count += len(msgs)
        pulls += 1
        tick(count)
    elapsed = prog.finish(count)
    consumer.close()
    out = _result(count, elapsed, prog, pulls=pulls, per_pull=count / max(pulls, 1))
    if error:
        out["error"] = error
    return out


# ====================================================================== RabbitMQ

def pika_connection(port: int):
    import pika
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, heartbeat=0, blocked_connection_timeout=STALL_S))


def _queue_depth(channel, queue: str) -> int:
    return channel.queue_declare(queue, durable=True, passive=True).method.message_count


def rabbitmq_produce(p: dict) -> dict:
    import pika
    queue, bs = p["dest"], p["batch"]
    values = _chunks(random_values())
    mask = DISTINCT_VALUES - 1
    conn = pika_connection(p["port"])
    ch, probe = conn.channel(), conn.channel()
    ch.queue_declare(queue, durable=True)
    before = _queue_depth(probe, queue)
    props = pika.BasicProperties(delivery_mode=2)      # persistent
    publish, prog = ch.basic_publish, Progress()
    if bs != 1:
        ch.tx_select()      # "batch 50": a transaction per 50 (AMQP has no message set)
    commit = ch.tx_commit
    t0 = prog.start()
    n = 0
    for k, _final in steps(prog, p["n_max"], p.get("seconds")):
        for v in values[k & mask]:
            publish("", queue, v, props)
        if bs != 1:
            commit()
        n += STEP
    t_sent = time.perf_counter()
    expected = before + n
    deadline = t_sent + p.get("timeout_s", 300)
    depth = _queue_depth(probe, queue)
    while depth < expected and time.perf_counter() < deadline:
        time.sleep(0.005)
        depth = _queue_depth(probe, queue)
    elapsed = prog.finish(n)
    conn.close()
    out = _result(n, elapsed, prog, send_loop_s=t_sent - t0)
    if depth != expected:
        out["error"] = f"queue holds {depth} messages, expected {expected}"
    return out


def rabbitmq_consume(p: dict) -> dict:
    n, queue = p["n"], p["dest"]
    conn = pika_connection(p["port"])
    ch = conn.channel()
    ch.basic_qos(prefetch_count=PREFETCH)
    prog = Progress()
    state = {"count": 0}
    tick = prog.tick

    def on_message(_channel, _method, _props, _body) -> None:
        c = state["count"] = state["count"] + 1
        if not c & TICK_MASK:
            tick(c)

    ch.basic_consume(queue, on_message, auto_ack=True)
    prog.start()
    last, last_move, error = 0, time.monotonic(), None
    while state["count"] < n:
        conn.process_data_events(time_limit=0.2)
        if state["count"] != last:
            last, last_move = state["count"], time.monotonic()
        elif time.monotonic() - last_move > STALL_S:
            error = f"no message for {STALL_S:.0f} s after {last}"
            break
    elapsed = prog.finish(state["count"])
    conn.close()
    out = _result(state["count"], elapsed, prog)
    if error:
        out["error"] = error
    return out


# ====================================================================== ActiveMQ

class _StompListener:
    """stomp.py callbacks (they run on stomp.py's receiver thread; stomp.py
    skips the callbacks a listener does not define)."""

    def __init__(self) -> None:
        self.receipts: set[str] = set()
        self.receipt_event = threading.Event()
        self.errors: list[str] = []
        self.count = 0
        self.done = threading.Event()
        self.on_message_hook = None

    def on_receipt(self, frame) -> None:
        self.receipts.add(frame.headers.get("receipt-id"))
        self.receipt_event.set()

    def on_error(self, frame) -> None:
        self.errors.append(f"{frame.headers.get('message')}: {frame.body!r:.200}")

    def on_message(self, frame) -> None:
        if self.on_message_hook is not None:
            self.on_message_hook(frame)


def _stomp_connection(port: int, listener: _StompListener):
    import stomp
    conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0), auto_decode=False)
    conn.set_listener("bench", listener)
    conn.connect(wait=True)
    # stomp.py leaves Nagle on: a receipted frame would wait for the delayed ACK
    conn.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def activemq_produce(p: dict) -> dict:
    queue, bs = "/queue/" + p["dest"], p["batch"]
    values = _chunks(random_values())
    mask = DISTINCT_VALUES - 1
    listener = _StompListener()
    conn = _stomp_connection(p["port"], listener)
    send, begin, commit, prog = conn.send, conn.begin, conn.commit, Progress()
    persistent = {"persistent": "true"}
    last = {"persistent": "true", "receipt": "last"}
    t0 = prog.start()
    n = 0
    for k, final in steps(prog, p["n_max"], p.get("seconds")):
        chunk = values[k & mask]
        if bs == 1:
            for v in chunk[:-1]:
                send(queue, v, headers=persistent)
            # no receipts, except on the very last message: the broker handles
            # a connection's frames in order, so its receipt means all are in
            send(queue, chunk[-1], headers=last if final else persistent)
        else:       # "batch 50": a transaction per 50 (STOMP has no message set)
            tx = begin()
            for v in chunk:
                send(queue, v, headers=persistent, transaction=tx)
            if final:
                commit(tx, headers={"receipt": "last"})
            else:
                commit(tx)
        n += STEP
    t_sent = time.perf_counter()
    deadline = t_sent + p.get("timeout_s", 300)
    while "last" not in listener.receipts and time.perf_counter() < deadline \
            and not listener.errors:
        listener.receipt_event.wait(0.5)
    elapsed = prog.finish(n)
    conn.disconnect()
    out = _result(n, elapsed, prog, send_loop_s=t_sent - t0)
    if "last" not in listener.receipts:
        out["error"] = "no receipt for the last frame" + (
            f"; broker errors: {listener.errors[:3]}" if listener.errors else "")
    return out


def activemq_consume(p: dict) -> dict:
    n, queue = p["n"], "/queue/" + p["dest"]
    listener = _StompListener()
    conn = _stomp_connection(p["port"], listener)
    prog = Progress()
    tick = prog.tick

    def on_message(_frame) -> None:
        listener.count += 1
        c = listener.count
        if not c & TICK_MASK:
            tick(c)
        if c >= n:
            listener.done.set()

    listener.on_message_hook = on_message
    prog.start()
    conn.subscribe(queue, id="bench", ack="auto",
                   headers={"activemq.prefetchSize": str(PREFETCH)})
    last, last_move, error = 0, time.monotonic(), None
    while not listener.done.wait(0.5):
        if listener.count != last:
            last, last_move = listener.count, time.monotonic()
        elif time.monotonic() - last_move > STALL_S:
            error = f"no message for {STALL_S:.0f} s after {last}"
            break
    elapsed = prog.finish(listener.count)
    conn.unsubscribe("bench")
    conn.disconnect()
    out = _result(listener.count, elapsed, prog)
    if error or listener.errors:
        out["error"] = "; ".join(filter(None, [error, *listener.errors[:3]]))
    return out


# ====================================================================== loopback TCP

def tcp_sink(p: dict) -> dict:
    """Receive one connection's bytes into a large buffer until EOF; the
    driver sends. Prints ``PORT n`` first."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        print(f"PORT {srv.getsockname()[1]}", flush=True)
        srv.settimeout(30)
        conn, _ = srv.accept()
    buf = bytearray(p.get("buffer", 4 << 20))
    view = memoryview(buf)
    total, t0 = 0, None
    with conn:
        while True:
            got = conn.recv_into(view)
            if not got:
                break
            if t0 is None:
                t0 = time.perf_counter()
            total += got
    elapsed = time.perf_counter() - (t0 or time.perf_counter())
    return {"bytes": total, "elapsed_s": elapsed,
            "mb_per_s": total / elapsed / 1e6 if elapsed > 0 else 0.0}


WORKERS = {"samsa_produce": samsa_produce, "samsa_consume": samsa_consume,
           "rabbitmq_produce": rabbitmq_produce, "rabbitmq_consume": rabbitmq_consume,
           "activemq_produce": activemq_produce, "activemq_consume": activemq_consume,
           "tcp_sink": tcp_sink}


def worker_main(kind: str, params: str) -> int:
    cpu0 = time.process_time()
    result = WORKERS[kind](json.loads(params))
    result["client_cpu_s"] = time.process_time() - cpu0
    print("RESULT " + json.dumps(result), flush=True)
    return 0
