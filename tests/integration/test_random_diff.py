"""Random differential test over every type: seeded random command
sequences run on rowan-server and on a real redis-server (Debian's 7.0),
replies compared one by one (differential.call: exact replies, errors with
their full text).

The key space is small (a few keys for every command, whatever its type),
so commands of one type constantly meet keys of another (WRONGTYPE), empty
and missing keys. Counts include huge and negative ones; some seeds run
over RESP3 (HELLO 3). Blocking commands run with short timeouts on keys
that may be empty.

What cannot be compared exactly is normalized, never skipped silently:
replies whose order Redis itself does not define (set members, SMEMBERS,
SINTER...) are sorted; TTL/PTTL are compared as "has a TTL"; XPENDING's
idle times are dropped. Commands whose replies depend on chance or time
(SPOP, SRANDMEMBER, HRANDFIELD, ZRANDMEMBER, RANDOMKEY, OBJECT IDLETIME,
XINFO CONSUMERS/STREAM FULL) are not generated, and stream IDs are always
explicit (never '*', which is the clock).

Every SWAP_EVERY commands the keys change sides by DUMP/RESTORE (Redis's
payload restored in Rowan and the other way round), so the sequence goes
on over values rebuilt from the other server's serialization.

A difference resynchronises the two servers (FLUSHALL on both) and the
sequence goes on, so one run lists every difference it meets; the test
fails with all of them."""
import random
import shutil
import time

import pytest

from conftest import RSet, RespError
from differential import call

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server as the reference")

KEYS = ["k0", "k1", "k2", "k3", "k4"]
VALUES = ["a", "b", "abc", "", "0", "1", "7", "-3", "10", "3.5", "-0.25", "xyz", "100000",
          "9223372036854775807", "1e3", "hello world"]
MEMBERS = ["m0", "m1", "m2", "m3", "m4", "m5", "1", "2", "-7", "a", "b", "c"]
FIELDS = ["f0", "f1", "f2", "f3", "1", "x"]
SCORES = ["0", "1", "2", "-1", "2.5", "-inf", "+inf", "1e10", "3", "0.1"]
INDEXES = [0, 1, 2, -1, -2, 3, 5, 10, -100, 100, 9999999999]
COUNTS = [0, 1, 2, 3, 5, 100, 10000000, -1]
LEX = ["-", "+", "[a", "(b", "[m1", "(m3", "[1", "[z"]
PLACES = [("13.361389", "38.115556", "Palermo"), ("15.087269", "37.502669", "Catania"),
          ("12.496366", "41.902782", "Rome"), ("9.189982", "45.464204", "Milan"),
          ("-0.127758", "51.507351", "London"), ("179.9", "-85.0", "Edge")]
# OBJECT ENCODING is compared for hashes, sorted sets and streams only:
# - strings: Redis answers "raw" for a short string built by APPEND,
#   SETRANGE, SETBIT, BITFIELD, PFADD...; Rowan keeps only the bytes and
#   answers from them ("int"/"embstr"), see t_introspect.c;
# - lists and sets: Rowan reports Redis 7.2's encodings by design (listpack
#   for small lists and sets; docs/DECISIONS.md), the reference is 7.0.
NO_ENCODING = ("string", "list", "set")
# String commands that edit bytes in place (a BITOP's sources count).
HLL_BREAKERS = {"SETRANGE", "APPEND", "SETBIT", "BITFIELD", "BITOP"}
# Commands whose reply lists elements in an order Redis does not define.
UNORDERED = {"SMEMBERS", "SINTER", "SUNION", "SDIFF", "SPOP", "KEYS"}
# Replies in the order of a hash table when Redis keeps the key as one
# (hash "hashtable", sorted set "skiplist": ZSCAN walks its dict).
HASH_READS = {"HKEYS", "HVALS", "HGETALL", "HSCAN", "ZSCAN"}


class Gen:
    """A seeded random command generator; next_ms keeps stream IDs
    explicit and mostly increasing."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.ms = 1000

    def key(self):
        return self.r.choice(KEYS)

    def pick(self, seq):
        return self.r.choice(seq)

    def some(self, seq, lo=1, hi=4):
        return [self.r.choice(seq) for _ in range(self.r.randint(lo, hi))]

    def sid(self):
        r = self.r.random()
        if r < 0.8:
            self.ms += self.r.randint(0, 3)
            return "%d-%d" % (self.ms, self.r.randint(0, 3))
        if r < 0.9:
            return "%d-*" % self.ms
        return self.pick(["0-1", "1000-0", "%d" % (self.ms - 1), "bad-id", "0-0"])

    def range_id(self):
        return self.pick(["-", "+", "0", "%d" % (self.ms - self.r.randint(0, 10)),
                          "(%d-0" % (self.ms - self.r.randint(0, 5)), "%d-1" % self.ms])

    # ---- strings and bitmaps
    def strings(self):
        k, v = self.key(), self.pick(VALUES)
        c = self.r.randrange(25)
        if c == 0:
            opt = self.pick([[], ["NX"], ["XX"], ["GET"], ["EX", "1000"], ["KEEPTTL"], ["XX", "GET"],
                             ["EX", "0"], ["PX", "-5"]])
            return ["SET", k, v] + opt
        if c == 1:
            return ["GET", k]
        if c == 2:
            return ["APPEND", k, v]
        if c == 3:
            return self.pick([["INCR", k], ["DECR", k], ["INCRBY", k, self.pick(INDEXES)],
                              ["DECRBY", k, self.pick(["5", "-9223372036854775808", "x"])]])
        if c == 4:
            return ["INCRBYFLOAT", k, self.pick(["1.5", "-2", "0.1", "1e308", "abc", "5.0e3", "inf"])]
        if c == 5:
            return ["SETRANGE", k, self.pick([0, 1, 3, 7, 20, -1, 536870912]), v]
        if c == 6:
            return ["GETRANGE", k, self.pick(INDEXES), self.pick(INDEXES)]
        if c == 7:
            return ["GETEX", k] + self.pick([[], ["PERSIST"], ["EX", "1000"], ["PX", "0"], ["EX", "x"]])
        if c == 8:
            return ["GETDEL", k]
        if c == 9:
            return ["STRLEN", k]
        if c == 10:
            return ["MSET"] + sum(([self.key(), self.pick(VALUES)] for _ in range(2)), [])
        if c == 11:
            return ["MGET"] + self.some(KEYS)
        if c == 12:
            return ["SETNX", k, v]
        if c == 13:
            return ["GETSET", k, v]
        if c == 14:
            return ["SETBIT", k, self.pick([0, 1, 7, 8, 15, 33, 100, -1]), self.pick(["0", "1", "2"])]
        if c == 15:
            return ["GETBIT", k, self.pick([0, 1, 7, 8, 100])]
        if c == 16:
            return ["BITCOUNT", k] + self.pick([[], ["0", "-1"], ["1", "2", "BIT"], ["0", "5", "BYTE"],
                                                ["-2", "-1"]])
        if c == 17:
            return ["BITPOS", k, self.pick(["0", "1"])] + self.pick([[], ["1"], ["0", "-1", "BIT"],
                                                                     ["2", "9", "BIT"]])
        if c == 18:
            op = self.pick(["AND", "OR", "XOR", "NOT"])
            srcs = [self.key()] if op == "NOT" else self.some(KEYS, 1, 3)
            return ["BITOP", op, self.key()] + srcs
        if c == 19:
            sub = []
            for _ in range(self.r.randint(1, 3)):
                t = self.pick(["i5", "u4", "i8", "u1", "i64", "u63", "u64"])
                off = self.pick(["0", "3", "#1", "100"])
                w = self.r.randrange(4)
                if w == 0:
                    sub += ["GET", t, off]
                elif w == 1:
                    sub += ["SET", t, off, self.pick(["1", "-1", "200", "x"])]
                elif w == 2:
                    sub += ["INCRBY", t, off, self.pick(["1", "30", "-100"])]
                else:
                    sub += ["OVERFLOW", self.pick(["WRAP", "SAT", "FAIL", "BAD"])]
            return ["BITFIELD", k] + sub
        if c == 20:
            return ["BITFIELD_RO", k, "GET", self.pick(["u8", "i4"]), self.pick(["0", "4"])]
        if c == 21:
            return ["MSETNX", self.key(), v, self.key(), self.pick(VALUES)]
        if c == 22:
            return ["LCS", self.key(), self.key()] + self.pick([[], ["LEN"], ["IDX", "MINMATCHLEN", "1"]])
        if c == 23:
            # (no SET ... PXAT in the past: Redis 7.0 stores the expired key
            # until something touches it, and DBSIZE counts it; Rowan never
            # stores it)
            return self.pick([["SET", k, v, "EXAT", "99999999999"], ["SET", k, v, "PXAT", "99999999999999"],
                              ["SETEX", k, "1000", v], ["PSETEX", k, "0", v], ["GETEX", k, "EXAT", "99999999999"],
                              ["INCRBY", k, "9223372036854775807"], ["SET", k, v, "NX", "XX"]])
        return ["SUBSTR", k, self.pick(INDEXES), self.pick(INDEXES)]

    # ---- hashes
    def hashes(self):
        k, f = self.key(), self.pick(FIELDS)
        c = self.r.randrange(14)
        if c == 0:
            return ["HSET", k] + sum(([self.pick(FIELDS), self.pick(VALUES)]
                                      for _ in range(self.r.randint(1, 3))), [])
        if c == 1:
            return ["HSETNX", k, f, self.pick(VALUES)]
        if c == 2:
            return ["HGET", k, f]
        if c == 3:
            return ["HMGET", k] + self.some(FIELDS)
        if c == 4:
            return ["HDEL", k] + self.some(FIELDS)
        if c == 5:
            return ["HLEN", k]
        if c == 6:
            return ["HEXISTS", k, f]
        if c == 7:
            return ["HINCRBY", k, f, self.pick(["1", "-5", "9223372036854775807", "x"])]
        if c == 8:
            return ["HINCRBYFLOAT", k, f, self.pick(["1.5", "-0.5", "x", "1e400"])]
        if c == 9:
            return [self.pick(["HKEYS", "HVALS", "HGETALL"]), k]
        if c == 10:
            return ["HSTRLEN", k, f]
        if c == 11:
            return ["HMSET", k, f, self.pick(VALUES)]
        if c == 12:
            return self.pick([["HSCAN", k, "0"], ["HSCAN", k, "0", "MATCH", "f*"], ["HRANDFIELD", k, "0"],
                              ["HSCAN", k, "x"]])
        return ["HSET", k, f]  # wrong arity

    # ---- lists
    def lists(self):
        k = self.key()
        c = self.r.randrange(16)
        if c == 0:
            return [self.pick(["LPUSH", "RPUSH"]), k] + self.some(VALUES)
        if c == 1:
            return [self.pick(["LPUSHX", "RPUSHX"]), k] + self.some(VALUES)
        if c == 2:
            return [self.pick(["LPOP", "RPOP"]), k] + self.pick([[], [str(self.pick(COUNTS))]])
        if c == 3:
            return ["LRANGE", k, self.pick(INDEXES), self.pick(INDEXES)]
        if c == 4:
            return ["LINDEX", k, self.pick(INDEXES)]
        if c == 5:
            return ["LSET", k, self.pick(INDEXES), self.pick(VALUES)]
        if c == 6:
            return ["LINSERT", k, self.pick(["BEFORE", "AFTER", "MIDDLE"]), self.pick(VALUES),
                    self.pick(VALUES)]
        if c == 7:
            return ["LREM", k, self.pick([0, 1, -1, 2, -2]), self.pick(VALUES)]
        if c == 8:
            return ["LTRIM", k, self.pick(INDEXES), self.pick(INDEXES)]
        if c == 9:
            opts = []
            if self.r.random() < 0.5:
                opts += ["RANK", str(self.pick([1, 2, -1, -2, 0]))]
            if self.r.random() < 0.5:
                opts += ["COUNT", str(self.pick([0, 1, 2, -1]))]
            if self.r.random() < 0.3:
                opts += ["MAXLEN", str(self.pick([0, 1, 3]))]
            return ["LPOS", k, self.pick(VALUES)] + opts
        if c == 10:
            keys = self.some(KEYS, 1, 3)
            return (["LMPOP", str(len(keys))] + keys + [self.pick(["LEFT", "RIGHT"])] +
                    self.pick([[], ["COUNT", str(self.pick(COUNTS))]]))
        if c == 11:
            return ["LMOVE", k, self.key(), self.pick(["LEFT", "RIGHT"]), self.pick(["LEFT", "RIGHT"])]
        if c == 12:
            return ["RPOPLPUSH", k, self.key()]
        if c == 13:
            return ["LLEN", k]
        if c == 14:
            return [self.pick(["BLPOP", "BRPOP"]), k, self.key(), "0.01"]
        return ["BLMOVE", k, self.key(), "LEFT", "RIGHT", "0.01"]

    # ---- sets
    def sets(self):
        k = self.key()
        c = self.r.randrange(14)
        if c == 0:
            return ["SADD", k] + self.some(MEMBERS)
        if c == 1:
            return ["SREM", k] + self.some(MEMBERS)
        if c == 2:
            return ["SISMEMBER", k, self.pick(MEMBERS)]
        if c == 3:
            return ["SMISMEMBER", k] + self.some(MEMBERS)
        if c == 4:
            return ["SCARD", k]
        if c == 5:
            return ["SMEMBERS", k]
        if c == 6:
            return [self.pick(["SINTER", "SUNION", "SDIFF"])] + self.some(KEYS, 1, 3)
        if c == 7:
            return [self.pick(["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]), self.key()] + self.some(KEYS, 1, 3)
        if c == 8:
            keys = self.some(KEYS, 1, 3)
            return ["SINTERCARD", str(len(keys))] + keys + self.pick([[], ["LIMIT", "1"], ["LIMIT", "-1"]])
        if c == 9:
            return ["SMOVE", k, self.key(), self.pick(MEMBERS)]
        if c == 10:
            return ["SADD", k] + [str(i) for i in self.some(range(-5, 600), 1, 6)]
        if c == 11:
            return ["SORT", k, "ALPHA"] + self.pick([[], ["DESC"], ["LIMIT", "1", "2"], ["GET", "#"],
                                                    ["STORE", self.key()], ["BY", "nosort", "LIMIT", "0", "1"]])
        if c == 12:
            return self.pick([["SSCAN", k, "0"], ["SRANDMEMBER", k, "0"], ["SPOP", k, "0"],
                              ["SORT_RO", k, "ALPHA"], ["SMISMEMBER", k]])
        return ["SORT", k] + self.pick([[], ["DESC", "LIMIT", "0", "3"]])

    # ---- sorted sets
    def zsets(self):
        k = self.key()
        c = self.r.randrange(21)
        if c == 0:
            opts = self.pick([[], ["NX"], ["XX"], ["GT"], ["LT", "CH"], ["CH"], ["NX", "GT"]])
            pairs = sum(([self.pick(SCORES), self.pick(MEMBERS)] for _ in range(self.r.randint(1, 3))), [])
            return ["ZADD", k] + opts + pairs
        if c == 1:
            return ["ZADD", k, "INCR", self.pick(SCORES), self.pick(MEMBERS)]
        if c == 2:
            return ["ZREM", k] + self.some(MEMBERS)
        if c == 3:
            return ["ZSCORE", k, self.pick(MEMBERS)]
        if c == 4:
            return ["ZMSCORE", k] + self.some(MEMBERS)
        if c == 5:
            return ["ZINCRBY", k, self.pick(SCORES), self.pick(MEMBERS)]
        if c == 6:
            return [self.pick(["ZCARD"]), k]
        if c == 7:
            return ["ZCOUNT", k, self.pick(SCORES), self.pick(SCORES + ["(1", "(2.5"])]
        if c == 8:
            w = self.r.randrange(4)
            if w == 0:
                args = [self.pick(INDEXES), self.pick(INDEXES)]
            elif w == 1:
                args = [self.pick(SCORES + ["(1"]), self.pick(SCORES), "BYSCORE"]
            elif w == 2:
                args = [self.pick(LEX), self.pick(LEX), "BYLEX"]
            else:
                args = [self.pick(SCORES), self.pick(SCORES), "BYSCORE", "REV"]
            if w and self.r.random() < 0.4:
                args += ["LIMIT", str(self.pick([0, 1, -1])), str(self.pick(COUNTS))]
            if w != 2 and self.r.random() < 0.5:
                args.append("WITHSCORES")
            return ["ZRANGE", k] + args
        if c == 9:
            return ["ZRANGESTORE", self.key(), k] + self.pick(
                [[self.pick(INDEXES), self.pick(INDEXES)], ["-inf", "+inf", "BYSCORE", "LIMIT", "1", "2"],
                 [self.pick(LEX), self.pick(LEX), "BYLEX"]])
        if c == 10:
            return [self.pick(["ZRANK", "ZREVRANK"]), k, self.pick(MEMBERS)]
        if c == 11:
            return [self.pick(["ZPOPMIN", "ZPOPMAX"]), k] + self.pick([[], [str(self.pick(COUNTS))]])
        if c == 12:
            keys = self.some(KEYS, 1, 3)
            opts = []
            if self.r.random() < 0.3:
                opts += ["WEIGHTS"] + [self.pick(["1", "2", "-1", "0.5"]) for _ in keys]
            if self.r.random() < 0.3:
                opts += ["AGGREGATE", self.pick(["SUM", "MIN", "MAX"])]
            op = self.pick(["ZUNION", "ZINTER", "ZDIFF"])
            if op == "ZDIFF":
                opts = []
            if self.r.random() < 0.5:
                opts.append("WITHSCORES")
            return [op, str(len(keys))] + keys + opts
        if c == 13:
            keys = self.some(KEYS, 1, 3)
            return [self.pick(["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"]), self.key(), str(len(keys))] + keys
        if c == 14:
            keys = self.some(KEYS, 1, 2)
            return ["ZINTERCARD", str(len(keys))] + keys
        if c == 15:
            return ["ZLEXCOUNT", k, self.pick(LEX), self.pick(LEX)]
        if c == 16:
            w = self.r.randrange(3)
            if w == 0:
                return ["ZREMRANGEBYSCORE", k, self.pick(SCORES), self.pick(SCORES)]
            if w == 1:
                return ["ZREMRANGEBYRANK", k, self.pick(INDEXES), self.pick(INDEXES)]
            return ["ZREMRANGEBYLEX", k, self.pick(LEX), self.pick(LEX)]
        if c == 17:
            keys = self.some(KEYS, 1, 2)
            return (["ZMPOP", str(len(keys))] + keys + [self.pick(["MIN", "MAX"])] +
                    self.pick([[], ["COUNT", str(self.pick(COUNTS))]]))
        if c == 18:
            return [self.pick(["BZPOPMIN", "BZPOPMAX"]), k, "0.01"]
        if c == 19:
            return ["ZREVRANGEBYSCORE", k, self.pick(SCORES), self.pick(SCORES), "WITHSCORES"]
        return self.pick([["ZSCAN", k, "0"], ["ZRANGEBYLEX", k, self.pick(LEX), self.pick(LEX), "LIMIT", "0", "2"],
                          ["ZREVRANGEBYLEX", k, self.pick(LEX), self.pick(LEX)], ["ZREVRANGE", k, "0", "-1", "WITHSCORES"],
                          ["ZRANGEBYSCORE", k, "-inf", "+inf", "WITHSCORES", "LIMIT", "1", "-1"],
                          ["ZADD", k, "GT", "LT", "1", "m0"], ["ZADD", k, "INCR", "1", "a", "2", "b"],
                          ["ZRANDMEMBER", k, "0"], ["ZADD", k, "nan", "m0"], ["ZINCRBY", k, "+inf", "m0"],
                          ["ZINCRBY", k, "-inf", "m0"]])

    # ---- streams
    def streams(self):
        k = self.key()
        g = self.pick(["g1", "g2"])
        cons = self.pick(["alice", "bob"])
        c = self.r.randrange(19)
        if c <= 2:
            opts = []
            if self.r.random() < 0.1:
                opts.append("NOMKSTREAM")
            if self.r.random() < 0.2:
                opts += [self.pick(["MAXLEN", "MINID"]), self.pick(["=", "~"])]
                opts.append(str(self.pick([0, 1, 3, 10])) if opts[-2] == "MAXLEN" else self.range_id().lstrip("("))
            fields = sum(([self.pick(FIELDS), self.pick(VALUES)] for _ in range(self.r.randint(1, 2))), [])
            return ["XADD", k] + opts + [self.sid()] + fields
        if c == 3:
            return ["XDEL", k] + [self.range_id().lstrip("(") for _ in range(self.r.randint(1, 2))]
        if c == 4:
            return ["XLEN", k]
        if c == 5:
            cmd = self.pick(["XRANGE", "XREVRANGE"])
            a, b = self.range_id(), self.range_id()
            return [cmd, k, a, b] + self.pick([[], ["COUNT", str(self.pick(COUNTS))]])
        if c == 6:
            return ["XTRIM", k, self.pick(["MAXLEN", "MINID"]), self.pick(["0", "2", "5"])]
        if c == 7:
            return ["XGROUP", "CREATE", k, g, self.pick(["0", "$", self.range_id().lstrip("(")])] + \
                self.pick([[], ["MKSTREAM"], ["ENTRIESREAD", "2"]])
        if c == 8:
            return ["XGROUP", self.pick(["CREATECONSUMER", "DELCONSUMER"]), k, g, cons]
        if c == 9:
            return ["XGROUP", self.pick(["DESTROY", "SETID"]), k, g] + (
                [self.pick(["0", "$"])] if self.r.random() < 0.5 else [])
        if c in (10, 11):
            opts = ["GROUP", g, cons]
            if self.r.random() < 0.7:
                opts += ["COUNT", str(self.pick([1, 2, 5, 0]))]
            if self.r.random() < 0.15:
                opts.append("NOACK")
            keys = [k] if self.r.random() < 0.8 else [k, self.key()]
            ids = [self.pick([">", ">", "0", self.range_id().lstrip("("), "$"]) for _ in keys]
            return ["XREADGROUP"] + opts + ["STREAMS"] + keys + ids
        if c == 12:
            return ["XACK", k, g] + [self.range_id().lstrip("(") for _ in range(self.r.randint(1, 3))]
        if c == 13:
            return ["XPENDING", k, g] + self.pick([[], ["-", "+", str(self.pick([1, 10]))],
                                                   ["-", "+", "10", cons], ["IDLE", "0", "-", "+", "5"]])
        if c == 14:
            ids = [self.range_id().lstrip("(") for _ in range(self.r.randint(1, 3))]
            return ["XCLAIM", k, g, cons, "0"] + ids + self.pick([[], ["JUSTID"], ["RETRYCOUNT", "5"]])
        if c == 15:
            return ["XAUTOCLAIM", k, g, cons, "0", self.pick(["0", "0-0", self.range_id().lstrip("(")])] + \
                self.pick([[], ["COUNT", str(self.pick([1, 3, 0]))], ["JUSTID"]])
        if c == 16:
            return self.pick([["XINFO", "GROUPS", k], ["XINFO", "STREAM", k]])
        if c == 17:
            return ["XREAD", "COUNT", str(self.pick([1, 3])), "STREAMS", k, self.pick(["0", "$", self.range_id().lstrip("(")])]
        return self.pick([["XSETID", k, "%d-5" % (self.ms + 1)], ["XSETID", k, "1-1"],
                          ["XSETID", k, "%d-0" % (self.ms + 2), "ENTRIESADDED", "1000", "MAXDELETEDID", "0-1"],
                          ["XGROUP", "SETID", k, g, "0", "ENTRIESREAD", "3"],
                          ["XREAD", "STREAMS", k, self.key(), "0", "0"],
                          ["XADD", k, "MAXLEN", "~", "2", "LIMIT", "1", self.sid(), "f", "v"],
                          ["XADD", k, "MINID", "=", "0", "LIMIT", "5", self.sid(), "f", "v"],
                          ["XRANGE", k, "-", "+", "COUNT", "0"], ["XREVRANGE", k, "+", "-", "COUNT", "-1"]])

    # ---- HyperLogLog
    def hll(self):
        k = self.key()
        c = self.r.randrange(4)
        if c <= 1:
            return ["PFADD", k] + [str(self.r.randrange(2000)) for _ in range(self.r.randint(0, 30))]
        if c == 2:
            return ["PFCOUNT"] + self.some(KEYS, 1, 3)
        return ["PFMERGE", self.key()] + self.some(KEYS, 0, 3)

    # ---- geo
    def geo(self):
        k = self.key()
        c = self.r.randrange(8)
        m = self.pick([p[2] for p in PLACES] + ["Nowhere"])
        if c <= 1:
            args = []
            for _ in range(self.r.randint(1, 3)):
                args += list(self.pick(PLACES))
            return ["GEOADD", k] + self.pick([[], ["NX"], ["XX", "CH"], ["CH"]]) + args
        if c == 2:
            return ["GEODIST", k, m, self.pick([p[2] for p in PLACES])] + self.pick([[], ["km"], ["mi"], ["ft"]])
        if c == 3:
            return [self.pick(["GEOPOS", "GEOHASH"]), k] + [self.pick([p[2] for p in PLACES] + ["x"])
                                                             for _ in range(2)]
        if c in (4, 5):
            frm = self.pick([["FROMMEMBER", m], ["FROMLONLAT", "15", "37"]])
            by = self.pick([["BYRADIUS", self.pick(["100", "500", "2000"]), "km"],
                            ["BYBOX", "400", "400", "km"], ["BYRADIUS", "10", "mi"]])
            opts = []
            if self.r.random() < 0.5:
                opts.append(self.pick(["ASC", "DESC"]))
            if self.r.random() < 0.3:
                opts += ["COUNT", str(self.pick([1, 2, 10]))]
            if c == 4:
                opts += self.pick([[], ["WITHDIST"], ["WITHCOORD", "WITHHASH"], ["WITHDIST", "WITHCOORD"]])
                if "ASC" not in opts and "DESC" not in opts:
                    opts.append("ASC")
                return ["GEOSEARCH", k] + frm + by + opts
            if "ASC" not in opts and "DESC" not in opts:
                opts.append("ASC")
            return ["GEOSEARCHSTORE", self.key(), k] + frm + by + opts + self.pick([[], ["STOREDIST"]])
        if c == 6:
            return ["GEORADIUS", k, "15", "37", self.pick(["200", "1000"]), "km", "ASC", "WITHDIST"]
        return ["GEORADIUSBYMEMBER", k, m, "300", "km", "ASC"] + self.pick([[], ["COUNT", "2"]])

    # ---- keys
    def generic(self):
        k = self.key()
        c = self.r.randrange(15)
        if c == 0:
            return ["TYPE", k]
        if c == 1:
            return ["EXISTS"] + self.some(KEYS)
        if c == 2:
            return [self.pick(["DEL", "UNLINK"])] + self.some(KEYS, 1, 2)
        if c == 3:
            return [self.pick(["RENAME", "RENAMENX"]), k, self.key()]
        if c == 4:
            return ["COPY", k, self.key()] + self.pick([[], ["REPLACE"]])
        if c == 5:
            return ["EXPIRE", k, self.pick(["1000", "2000", "-1", "x"])] + self.pick([[], ["NX"], ["XX"], ["GT"], ["LT"]])
        if c == 6:
            return ["PERSIST", k]
        if c == 7:
            return [self.pick(["TTL", "PTTL"]), k]
        if c == 8:
            return ["OBJECT", "ENCODING", k]
        if c == 9:
            return ["DBSIZE"]
        if c == 10:
            return ["TOUCH"] + self.some(KEYS)
        if c == 11:
            return ["PEXPIREAT", k, self.pick(["1", "99999999999999"])]
        if c == 12:
            return ["EXPIRETIME", k]
        if c == 13:
            return self.pick([["MOVE", k, "1"], ["COPY", k, self.key(), "DB", "1"], ["SWAPDB", "0", "1"],
                              ["KEYS", "*"], ["RENAME", k, k], ["COPY", k, k], ["EXISTS", k, k],
                              ["EXPIRE", k, "-5"], ["PEXPIRE", k, "100000", "GT"], ["DEL", k, k]])
        return ["OBJECT", self.pick(["FREQ", "HELP"]), k] if self.r.random() < 0.3 else ["TYPE", k]

    FAMILIES = ["strings", "hashes", "lists", "sets", "zsets", "streams", "hll", "geo", "generic"]
    WEIGHTS = [16, 10, 12, 10, 14, 16, 6, 6, 12]

    def command(self):
        fam = self.r.choices(self.FAMILIES, self.WEIGHTS)[0]
        return [str(a) for a in getattr(self, fam)()]


def pairs_sorted(flat):
    return sorted(zip(flat[0::2], flat[1::2]))


def normalize(cmd, rep, big_hash=False):
    """rep made comparable; big_hash: cmd reads a hash table of Redis's
    (HASH_READS), whose order Redis does not define (Rowan keeps insertion
    order while a hash is listpack-sized, README)."""
    name = cmd[0].upper()
    if isinstance(rep, RSet) or (name in UNORDERED and isinstance(rep, list)):
        return sorted(rep, key=repr)
    if big_hash and isinstance(rep, list):
        if name in ("HKEYS", "HVALS"):
            return sorted(rep)
        if name == "HGETALL":
            return pairs_sorted(rep)
        if name in ("HSCAN", "ZSCAN") and len(rep) == 2 and isinstance(rep[1], list):
            return [rep[0], pairs_sorted(rep[1])]
    if name == "SSCAN" and isinstance(rep, list) and len(rep) == 2 and isinstance(rep[1], list):
        return [rep[0], sorted(rep[1])]
    if name in ("TTL", "PTTL") and isinstance(rep, int) and rep > 0:
        return "has a TTL"
    if name == "EXPIRETIME" and isinstance(rep, int) and rep > 0:
        return "has an expire time"
    if name == "XPENDING" and len(cmd) > 3 and isinstance(rep, list):
        return [e[:2] + e[3:] if isinstance(e, list) and len(e) == 4 else e for e in rep]
    if name == "XINFO" and isinstance(rep, (list, dict)):
        return _drop_radix_nodes(rep)
    return rep


def _drop_radix_nodes(rep):
    """XINFO STREAM's radix-tree-nodes follows Redis's rax layout, which
    Rowan does not have (t_stream.c answers keys + 1)."""
    if isinstance(rep, dict):
        return {k: v for k, v in rep.items() if k != b"radix-tree-nodes"}
    out = list(rep)
    for i in range(0, len(out) - 1, 2):
        if out[i] == b"radix-tree-nodes":
            del out[i:i + 2]
            break
    return out


def leave_out(redis_, cmd):
    """The command, or TYPE of its key where it meets a known difference
    (asked of Redis first):
    - OBJECT ENCODING of strings, lists, sets (NO_ENCODING above);
    - editing an HLL's bytes (HLL_BREAKERS): Redis's PFADD on the corrupt
      HLL that results changes some registers before it answers
      INVALIDOBJ; Rowan's PFADD changes nothing when it fails;
    - SORT (and SORT_RO) of a sorted set: Redis 7.0 converts a listpack sorted set to a
      skiplist when SORT reads it (sort.c), so OBJECT ENCODING differs
      afterwards; Rowan's read commands change no encoding;
    - SORT BY nosort of a set: the set's own order, which Redis does not
      define (and is not Rowan's)."""
    if cmd[:2] == ["OBJECT", "ENCODING"] and redis_.call("TYPE", cmd[2]) in NO_ENCODING:
        return ["TYPE", cmd[2]]
    if cmd[0] in ("SORT", "SORT_RO") and redis_.call("TYPE", cmd[1]) == "zset":
        return ["TYPE", cmd[1]]
    if cmd[0] == "SORT" and "nosort" in cmd and redis_.call("TYPE", cmd[1]) == "set":
        return ["TYPE", cmd[1]]
    keys = cmd[3:] if cmd[0] == "BITOP" else cmd[1:2]
    if cmd[0] in HLL_BREAKERS and any(_is_hll(redis_, k) for k in keys):
        return ["TYPE", cmd[1]]
    return cmd


def _is_hll(redis_, key):
    v = redis_.call("GETRANGE", key, 0, 3)
    return isinstance(v, bytes) and v == b"HYLL"


def run_seed(rowan, redis_, seed, n, resp3=False):
    """n commands of seed on both; returns the differences found, each as
    (seed, index, command, rowan's reply, redis's reply)."""
    for cl in (rowan, redis_):
        assert cl.call("FLUSHALL") == "OK"
        cl.call("HELLO", 3 if resp3 else 2)
    gen = Gen(seed)
    diffs, recent = [], []
    for i in range(n):
        cmd = gen.command()
        cmd = leave_out(redis_, cmd)
        big = cmd[0] in HASH_READS and redis_.call("OBJECT", "ENCODING", cmd[1]) in (b"hashtable", b"skiplist")
        got = normalize(cmd, call(rowan, *cmd), big)
        want = normalize(cmd, call(redis_, *cmd), big)
        recent = (recent + [cmd])[-300:]
        if got == want and i % SWAP_EVERY == SWAP_EVERY - 1:
            cmd, got, want = swap_dumps(rowan, redis_)
        if got != want:
            diffs.append((seed, i, cmd, got, want, recent))
            recent = []
            for cl in (rowan, redis_):
                cl.call("FLUSHALL")
    return diffs


SWAP_EVERY = 100


def swap_dumps(rowan, redis_):
    """Every key moves across by DUMP/RESTORE: Redis's payload replaces the
    key in Rowan, Rowan's replaces it in Redis (with its expiry time), so
    the sequence goes on over values each restored from the other's
    serialization. Returns (what, rowan's replies, redis's replies)."""
    got, want = [], []
    for k in KEYS:
        d_rowan, d_redis = call(rowan, "DUMP", k), call(redis_, "DUMP", k)
        if d_rowan is None or d_redis is None:
            got.append(d_rowan is None)
            want.append(d_redis is None)
            continue
        at = [call(cl, "PEXPIRETIME", k) for cl in (rowan, redis_)]
        opts = lambda t: ["REPLACE"] + (["ABSTTL"] if t > 0 else [])
        got.append(call(rowan, "RESTORE", k, max(at[1], 0), d_redis, *opts(at[1])))
        want.append(call(redis_, "RESTORE", k, max(at[0], 0), d_rowan, *opts(at[0])))
    return ["DUMP/RESTORE", "across"] + KEYS, got, want


def report(diffs, history=0):
    """The differences, each with the last 12 commands on its keys (since
    the last resynchronisation) when history is set."""
    out = []
    for s, i, c, g, w, recent in diffs:
        out.append("seed %d #%d %s\n  rowan: %r\n  redis: %r" % (s, i, " ".join(c), g, w))
        if history:
            keys = set(c) & set(KEYS)
            touched = [x for x in recent[:-1] if keys & set(x)]
            out += ["    after: " + " ".join(x) for x in touched[-history:]]
    return "\n".join(out)


# Seeds 1, 3 and 7 met the differences fixed with this test (XDEL's check
# order, XREADGROUP NOACK without COUNT, GEOPOS in RESP3, the search cell
# of a point on the top edge); FOUND below keeps them as fixed sequences.
@pytest.mark.parametrize("seed,resp3", [(1, False), (2, False), (3, True), (7, True), (12, False)])
def test_random_commands_match_redis(pair, seed, resp3):
    rowan, ref = pair[0].resp(), pair[1].resp()
    t0 = time.monotonic()
    diffs = run_seed(rowan, ref, seed, 4000, resp3)
    assert not diffs, "%d differences (%.1fs):\n%s" % (len(diffs), time.monotonic() - t0,
                                                      report(diffs[:20], history=12))
    assert rowan.call("PING") == "PONG"


# Differences the random sequences found, reduced to a few commands each.
FOUND = [
    # XDEL looks the key up before it checks the IDs (missing key: 0)
    [["XDEL", "nokey", "-"], ["SET", "s", "x"], ["XDEL", "s", "-"], ["XDEL", "s", "bad", "1-1"]],
    # XREADGROUP NOACK with no COUNT (or COUNT 0) serves every new entry
    [["XADD", "s", "1004-2", "f", "1"], ["XGROUP", "CREATE", "s", "g", "1004-2"],
     ["XADD", "s", "1006-1", "f", "2"], ["XADD", "s", "1006-2", "f", "3"],
     ["XREADGROUP", "GROUP", "g", "c", "NOACK", "STREAMS", "s", ">"],
     ["XADD", "s", "1007-1", "f", "4"],
     ["XREADGROUP", "GROUP", "g", "c", "COUNT", "0", "NOACK", "STREAMS", "s", ">"],
     ["XINFO", "GROUPS", "s"], ["XPENDING", "s", "g"]],
    # XREADGROUP naming a stream twice: the second read sees the first's
    # deliveries (pending entries, last-delivered ID)
    [["XADD", "s", "1-1", "f", "v"], ["XADD", "s", "2-1", "f", "v"], ["XGROUP", "CREATE", "s", "g", "0"],
     ["XREADGROUP", "GROUP", "g", "bob", "COUNT", "0", "STREAMS", "s", "s", ">", "0"],
     ["XADD", "s", "3-1", "f", "v"], ["XADD", "s", "4-1", "f", "v"],
     ["XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "STREAMS", "s", "s", "s", ">", ">", "0"],
     ["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "s", ">", ">"],
     ["XPENDING", "s", "g"], ["XINFO", "GROUPS", "s"]],
    # non-geo scores whose point is on the top edge: the centre cell is one
    # row past the last, and finds them
    [["ZADD", "z", "0.1", "m", "6958199912461396", "Palermo", "6958894741593818", "Catania"],
     ["GEOSEARCH", "z", "FROMMEMBER", "Palermo", "BYRADIUS", "2000", "km", "ASC", "WITHDIST", "WITHHASH"],
     ["GEOSEARCHSTORE", "d", "z", "FROMMEMBER", "Palermo", "BYBOX", "300", "300", "km", "DESC"],
     ["GEORADIUSBYMEMBER", "z", "Catania", "200", "km", "ASC"],
     ["GEOSEARCH", "z", "FROMLONLAT", "180", "85.05112878", "BYRADIUS", "100", "km", "ASC"],
     ["ZRANGE", "d", "0", "-1", "WITHSCORES"]],
]


@pytest.mark.parametrize("resp3", [False, True])
def test_found_differences(pair, resp3):
    rowan, ref = pair[0].resp(), pair[1].resp()
    # GEOPOS and WITHCOORD answer doubles in RESP3 (addReplyHumanLongDouble)
    geo = [["GEOADD", "g", "13.361389", "38.115556", "Palermo", "-0.127758", "51.507351", "London"],
           ["GEOPOS", "g", "Palermo", "nope", "London"],
           ["GEOSEARCH", "g", "FROMLONLAT", "0", "51", "BYRADIUS", "200", "km", "ASC", "WITHCOORD"],
           ["GEORADIUS", "g", "0", "51", "200", "km", "WITHCOORD", "WITHDIST"]]
    for seq in FOUND + [geo]:
        for cl in (rowan, ref):
            assert cl.call("FLUSHALL") == "OK"
            cl.call("HELLO", 3 if resp3 else 2)
        for cmd in seq:
            got, want = call(rowan, *cmd), call(ref, *cmd)
            assert got == want, "%s: rowan %r, redis %r" % (" ".join(cmd), got, want)
