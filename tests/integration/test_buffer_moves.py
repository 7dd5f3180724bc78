"""Client buffers are compacted in amortized linear time.

A connection's query buffer and output buffer drop their consumed prefix
by moving what is left to the front. Doing that after every round made the
cost grow with the square of the buffer: a 16 MB reply leaving through a
slow reader moved the unsent rest after each write, and a pipeline held
back by output back-pressure (a few commands per round) moved the rest of
a 20 MB query buffer after each round. The worker did nothing else
meanwhile, so its other clients waited (a PING took seconds under the
soak). Each buffer now moves its rest only once the consumed prefix is at
least as long, so the bytes moved stay below the bytes the connection
sent and received.

INFO's client_buffer_moved_bytes counts the bytes moved; each test checks
it against total_net_input_bytes + total_net_output_bytes over the same
window, and checks every reply, in order, so the compaction cannot have
lost or reordered bytes. The previous code moves 20-60 times the traffic
here.
"""
import socket
import threading

from conftest import RespReader, encode_command

SMALL_RCVBUF = 64 * 1024


def counters(srv):
    st = srv.info("stats")["stats"]
    return (int(st["client_buffer_moved_bytes"]),
            int(st["total_net_input_bytes"]) + int(st["total_net_output_bytes"]))


def assert_moves_within_traffic(srv, moved0, traffic0):
    moved, traffic = counters(srv)
    assert moved - moved0 <= traffic - traffic0, (
        "moved %d bytes to compact buffers for %d bytes of traffic" %
        (moved - moved0, traffic - traffic0))


def slow_reader(port):
    """A connection whose kernel receive buffer is small (set before
    connecting), so the server's replies leave in many small writes."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RCVBUF)
    s.settimeout(60)
    s.connect(("127.0.0.1", port))
    return s


def test_pipeline_held_back_by_output(server):
    """300 ECHOs of 64 KB, written whole before any reply is read: the
    server reads them all into the query buffer, and back-pressure runs a
    few per round as the reader takes its replies."""
    payloads = [(b"%04d" % i) * (16 * 1024) for i in range(300)]
    moved0, traffic0 = counters(server)
    s = slow_reader(server.port)
    try:
        data = b"".join(encode_command("ECHO", p) for p in payloads)
        sender = threading.Thread(target=s.sendall, args=(data,))
        sender.start()
        sender.join(60)
        assert not sender.is_alive(), "the server stopped reading the pipeline"
        reader = RespReader(s)
        for i, p in enumerate(payloads):
            assert reader.read() == p, "reply %d" % i
    finally:
        s.close()
    assert_moves_within_traffic(server, moved0, traffic0)


def test_large_reply_to_slow_reader(server):
    """One 16 MB MGET reply, read 16 KB at a time through a 64 KB window."""
    c = server.resp()
    values = [bytes([65 + i]) * (1024 * 1024) for i in range(16)]
    for i, v in enumerate(values):
        assert c.call("SET", "bufmove:%d" % i, v) == "OK"
    c.close()
    moved0, traffic0 = counters(server)
    s = slow_reader(server.port)
    try:
        s.sendall(encode_command("MGET", *["bufmove:%d" % i for i in range(16)]))
        got = bytearray()
        want = encode_reply(values)
        while len(got) < len(want):
            chunk = s.recv(16 * 1024)
            assert chunk, "the server closed the connection"
            got += chunk
        assert bytes(got) == want
    finally:
        s.close()
    assert_moves_within_traffic(server, moved0, traffic0)


def encode_reply(values):
    return b"*%d\r\n" % len(values) + b"".join(
        b"$%d\r\n%s\r\n" % (len(v), v) for v in values)
