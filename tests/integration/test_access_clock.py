"""Access clocks of written keys (evict.c), differential: run with
--target redis for the reference.

A write under a policy that is not LFU stores its access clock without
reading it (issue 14: the read was a cache miss per SET); under an LFU
policy a write still counts as an access. Both must still answer OBJECT
IDLETIME / OBJECT FREQ as Redis does.
"""
import time


def with_policy(cl, policy):
    assert cl.call("CONFIG", "SET", "maxmemory-policy", policy) == "OK"


def test_overwrite_resets_idletime_under_lru(server):
    cl = server.resp()
    with_policy(cl, "allkeys-lru")
    try:
        cl.call("SET", "ac:k", "v1")
        time.sleep(2.1)
        assert cl.call("OBJECT", "IDLETIME", "ac:k") >= 2
        cl.call("SET", "ac:k", "v2")
        assert cl.call("OBJECT", "IDLETIME", "ac:k") <= 1
        assert cl.call("GET", "ac:k") == b"v2"
    finally:
        with_policy(cl, "noeviction")
        cl.call("DEL", "ac:k")


def test_overwrites_count_under_lfu(server):
    cl = server.resp()
    with_policy(cl, "allkeys-lfu")
    try:
        cl.call("SET", "ac:f", "v")
        assert cl.call("OBJECT", "FREQ", "ac:f") == 5        # LFU_INIT_VAL
        for i in range(300):
            cl.call("SET", "ac:f", "v%d" % i)
        assert cl.call("OBJECT", "FREQ", "ac:f") > 6
    finally:
        with_policy(cl, "noeviction")
        cl.call("DEL", "ac:f")

