"""String and generic-key corners where a natural implementation differs from
Redis: option repetition and conflicts, the order in which arguments and the
key are checked, Redis's strict number rules and output formats, glob quirks.

Every expectation here was compared byte for byte with redis-server; run
with --target=redis to check them against Redis itself.

`c` gives exact replies: str = simple string, bytes = bulk, int, None = nil,
RespError = error reply with its full text."""
import time

from conftest import RespError

E_SYNTAX = RespError("ERR syntax error")
E_NOTINT = RespError("ERR value is not an integer or out of range")
E_NOTFLOAT = RespError("ERR value is not a valid float")
LLONG_MAX = "9223372036854775807"
LLONG_MIN = "-9223372036854775808"


def E_EXPIRE(cmd):
    return RespError("ERR invalid expire time in '%s' command" % cmd)


# ------------------------------------------------------------------ SET
def test_set_repeated_options_last_wins(c):
    assert c.call("SET", "k", "v", "EX", "10", "EX", "1000") == "OK"
    assert 990 <= c.call("TTL", "k") <= 1000
    assert c.call("SET", "k", "v", "NX", "NX") is None
    assert c.call("SET", "k", "x", "KEEPTTL", "KEEPTTL") == "OK"
    assert c.call("TTL", "k") > 0
    assert c.call("SET", "k", "w", "GET", "GET") == b"x"
    assert c.call("TTL", "k") == -1


def test_set_conflicting_options(c):
    for opts in (("NX", "XX"), ("XX", "NX"), ("EX", "10", "PX", "10"),
                 ("EX", "10", "KEEPTTL"), ("KEEPTTL", "EXAT", "10"), ("PERSIST",),
                 ("EX",), ("GET", "EX"), ("PXAT", "1", "EXAT", "1")):
        assert c.call("SET", "k", "v", *opts) == E_SYNTAX, opts
    assert c.call("EXISTS", "k") == 0


def test_set_expire_limits(c):
    # seconds must survive *1000, relative times must survive +now
    assert c.call("SET", "k", "v", "EX", "9223372036854776") == E_EXPIRE("set")
    assert c.call("SET", "k", "v", "PX", LLONG_MAX) == E_EXPIRE("set")
    assert c.call("SET", "k", "v", "EXAT", "9223372036854776") == E_EXPIRE("set")
    assert c.call("SET", "k", "v", "PXAT", LLONG_MAX) == "OK"
    assert c.call("PEXPIRETIME", "k") == int(LLONG_MAX)
    assert c.call("SET", "k", "v", "EX", "1.5") == E_NOTINT
    assert c.call("SETEX", "k", "0", "v") == E_EXPIRE("setex")
    assert c.call("PSETEX", "k", "-1", "v") == E_EXPIRE("psetex")


def test_set_nx_get_returns_old_value_without_writing(c):
    assert c.call("SET", "k", "old", "EX", "100") == "OK"
    assert c.call("SET", "k", "new", "NX", "GET") == b"old"
    assert c.call("GET", "k") == b"old"
    assert c.call("SET", "missing", "v", "XX", "GET") is None
    assert c.call("EXISTS", "missing") == 0


def test_set_past_absolute_expiry_with_get(c):
    assert c.call("SET", "k", "old") == "OK"
    assert c.call("SET", "k", "new", "EXAT", "1", "GET") == b"old"
    assert c.call("EXISTS", "k") == 0


# ------------------------------------------------------------------ GETEX
def test_getex_checks_key_before_expire_value(c):
    # a missing key answers nil even when the expiry is bad...
    assert c.call("GETEX", "missing", "EX", "abc") is None
    assert c.call("GETEX", "missing", "EX", "0") is None
    # ...but option syntax is checked first
    assert c.call("GETEX", "missing", "FOO") == E_SYNTAX
    assert c.call("SET", "k", "v") == "OK"
    assert c.call("GETEX", "k", "EX", "abc") == E_NOTINT
    assert c.call("GETEX", "k", "EX", "0") == E_EXPIRE("getex")
    for opts in (("NX",), ("KEEPTTL",), ("GET",), ("PERSIST", "EX", "1"),
                 ("EX", "1", "PERSIST"), ("EX",)):
        assert c.call("GETEX", "k", *opts) == E_SYNTAX, opts
    assert c.call("GETEX", "k", "PERSIST", "PERSIST") == b"v"


def test_getex_past_absolute_expiry_deletes(c):
    assert c.call("SET", "k", "v") == "OK"
    assert c.call("GETEX", "k", "PXAT", "1") == b"v"
    assert c.call("EXISTS", "k") == 0


# ------------------------------------------------------------------ numbers
def test_strict_integer_rule(c):
    for text in ("-0", "+1", "01", " 1", "1 ", "1.0", "", "0x10",
                 "00000000000000000001", "9223372036854775808"):
        assert c.call("SET", "n", text) == "OK"
        assert c.call("INCR", "n") == E_NOTINT, text
    assert c.call("SET", "n", "0") == "OK"
    assert c.call("INCR", "n") == 1


def test_decrby_llong_min(c):
    assert c.call("DECRBY", "n", LLONG_MIN) == RespError("ERR decrement would overflow")
    assert c.call("INCRBY", "n", LLONG_MIN) == int(LLONG_MIN)
    assert c.call("DECR", "n") == RespError("ERR increment or decrement would overflow")


def test_incrbyfloat_output_format(c):
    assert c.call("INCRBYFLOAT", "f", "10.5") == b"10.5"
    assert c.call("INCRBYFLOAT", "f", "0.1") == b"10.6"
    assert c.call("INCRBYFLOAT", "g", "5.0e3") == b"5000"
    assert c.call("INCRBYFLOAT", "g", "2.0e2") == b"5200"
    assert c.call("INCRBYFLOAT", "h", "-1e-20") == b"0"
    assert c.call("INCRBYFLOAT", "i", "0x10") == b"16"
    big = c.call("INCRBYFLOAT", "j", "1e300")
    assert len(big) == 301 and big.startswith(b"1")


def test_incrbyfloat_errors_and_order(c):
    assert c.call("INCRBYFLOAT", "f", "nan") == E_NOTFLOAT
    assert c.call("INCRBYFLOAT", "f", " 1") == E_NOTFLOAT
    assert len(c.call("INCRBYFLOAT", "f", "1e400")) == 401   # long double range
    assert c.call("INCRBYFLOAT", "f", "inf") == RespError(
        "ERR increment would produce NaN or Infinity")
    assert c.call("SET", "s", "inf") == "OK"    # "inf" parses, then fails the check
    assert c.call("INCRBYFLOAT", "s", "1") == RespError(
        "ERR increment would produce NaN or Infinity")
    # the stored value is checked before the increment
    assert c.call("SET", "s", "abc") == "OK"
    assert c.call("INCRBYFLOAT", "s", "abc") == E_NOTFLOAT


# ------------------------------------------------------------------ ranges and bits
def test_setrange_with_empty_value_never_creates(c):
    assert c.call("SETRANGE", "k", "5", "") == 0
    assert c.call("EXISTS", "k") == 0
    assert c.call("SETRANGE", "k", "2", "ab") == 4
    assert c.call("GET", "k") == b"\x00\x00ab"
    assert c.call("SETRANGE", "k", "100", "") == 4


def test_setbit_zero_on_missing_key_creates_it(c):
    assert c.call("SETBIT", "b", "0", "0") == 0
    assert c.call("GET", "b") == b"\x00"
    assert c.call("SETBIT", "b", "1", "2") == RespError("ERR bit is not an integer or out of range")
    assert c.call("SETBIT", "b", "-1", "1") == RespError(
        "ERR bit offset is not an integer or out of range")


def test_bitcount_argument_order(c):
    # Redis 7.2 looks the key up first: a missing key is 0 whatever follows
    assert c.call("BITCOUNT", "missing", "a", "b") == 0
    assert c.call("BITCOUNT", "missing", "0") == 0
    assert c.call("SET", "f", "foobar") == "OK"
    assert c.call("BITCOUNT", "f", "0") == E_SYNTAX
    assert c.call("BITCOUNT", "f", "a", "b") == E_NOTINT
    # an empty negative range answers 0 before the unit is looked at
    assert c.call("BITCOUNT", "f", "-1", "-2", "FOO") == 0
    assert c.call("BITCOUNT", "f", "0", "1", "FOO") == E_SYNTAX
    assert c.call("BITCOUNT", "f", "5", "30", "BIT") == 17
    assert c.call("BITCOUNT", "f", "-2", "-1", "bit") == 1
    assert c.call("BITCOUNT", "f", "3", "3", "BIT") == 0
    assert c.call("BITCOUNT", "f", "1", "1", "BIT") == 1


def test_getrange_extremes(c):
    assert c.call("SET", "s", "hello") == "OK"
    assert c.call("GETRANGE", "s", LLONG_MIN, LLONG_MAX) == b"hello"
    assert c.call("GETRANGE", "s", "-1", "-5") == b""
    assert c.call("GETRANGE", "s", "-100", "-50") == b"h"
    assert c.call("GETRANGE", "nokey", "x", "1") == E_NOTINT


# ------------------------------------------------------------------ expiry
def test_expire_limits_and_option_errors(c):
    assert c.call("SET", "k", "v") == "OK"
    assert c.call("EXPIRE", "k", "9223372036854776") == E_EXPIRE("expire")
    assert c.call("EXPIREAT", "k", "9223372036854776") == E_EXPIRE("expireat")
    assert c.call("PEXPIRE", "k", LLONG_MAX) == E_EXPIRE("pexpire")
    # options are checked before the time
    assert c.call("EXPIRE", "k", "x", "foo") == RespError("ERR Unsupported option foo")
    assert c.call("EXPIRE", "k", "10", "xx", "gt") == 0
    assert c.call("PEXPIREAT", "k", LLONG_MAX) == 1
    assert c.call("EXPIRETIME", "k") == 9223372036854776


def test_pexpireat_zero_deletes_rather_than_persists(c):
    assert c.call("SET", "k", "v") == "OK"
    assert c.call("PEXPIREAT", "k", "0") == 1
    assert c.call("EXISTS", "k") == 0
    assert c.call("SET", "k", "v") == "OK"
    assert c.call("EXPIRE", "k", "-9223372036854775") == 1
    assert c.call("EXISTS", "k") == 0


def test_lt_on_key_without_ttl_applies(c):
    assert c.call("SET", "k", "v") == "OK"
    assert c.call("EXPIRE", "k", "100", "GT") == 0
    assert c.call("EXPIRE", "k", "100", "LT") == 1
    assert c.call("SET", "p", "v") == "OK"
    assert c.call("EXPIRE", "p", "-1", "LT") == 1
    assert c.call("EXISTS", "p") == 0


def test_ttl_rounds_to_nearest_second(c):
    assert c.call("SET", "k", "v") == "OK"
    assert c.call("PEXPIRE", "k", "1800") == 1
    assert c.call("TTL", "k") == 2
    assert c.call("PEXPIRE", "k", "1300") == 1
    assert c.call("TTL", "k") == 1
    assert c.call("PEXPIREAT", "k", "4000000000500") == 1
    assert c.call("EXPIRETIME", "k") == 4000000001
    assert c.call("PEXPIREAT", "k", "4000000000499") == 1
    assert c.call("EXPIRETIME", "k") == 4000000000


# ------------------------------------------------------------------ KEYS / SCAN
def test_glob_quirks(c):
    assert c.call("MSET", "", "e", "a", "1", "]", "2", "b", "3") == "OK"
    assert sorted(c.call("KEYS", "*")) == [b"", b"]", b"a", b"b"]
    # only the literal "*" shortcut matches the empty key name
    assert sorted(c.call("KEYS", "**")) == [b"]", b"a", b"b"]
    assert c.call("KEYS", "") == [b""]
    # "[a-]" is unterminated: "a-]" reads as the range ']'..'a'
    assert sorted(c.call("KEYS", "[a-]")) == [b"]", b"a"]
    assert sorted(c.call("KEYS", "[ab")) == [b"a", b"b"]   # unterminated class
    assert sorted(c.call("KEYS", "[^a]")) == [b"]", b"b"]


def test_pathological_pattern_is_fast(c):
    assert c.call("SET", "a" * 5000, "v") == "OK"
    t = time.monotonic()
    assert c.call("KEYS", "a*" * 300 + "b") == []
    cur, keys = c.call("SCAN", "0", "MATCH", "*a" * 2000 + "*b", "COUNT", "100")
    assert keys == []
    assert time.monotonic() - t < 2


def test_scan_cursor_parsing(c):
    assert c.call("SET", "k", "v") == "OK"
    for cur in ("", "+0", "0"):
        assert c.call("SCAN", cur, "COUNT", "1000") == [b"0", [b"k"]], cur
    for cur in (" 1", "1 ", "x", "18446744073709551616"):
        assert c.call("SCAN", cur) == RespError("ERR invalid cursor"), cur
    assert c.call("SCAN", "0", "COUNT", "0") == E_SYNTAX
    assert c.call("SCAN", "0", "COUNT") == E_SYNTAX
    assert c.call("SCAN", "0", "MATCH", "*", "COUNT") == E_SYNTAX


def test_scan_type_filters(c):
    assert c.call("MSET", "a", "1", "b", "2") == "OK"
    # an unknown type is not an error in 7.2: it matches nothing
    assert c.call("SCAN", "0", "TYPE", "foo", "COUNT", "1000") == [b"0", []]
    assert c.call("SCAN", "0", "TYPE", "list", "COUNT", "1000") == [b"0", []]
    _, keys = c.call("SCAN", "0", "TYPE", "STRING", "MATCH", "a", "COUNT", "1000")
    assert keys == [b"a"]
    _, keys = c.call("SCAN", "0", "TYPE", "hash", "MATCH", "*", "COUNT", "1000")
    assert keys == []


# ------------------------------------------------------------------ databases
def test_db_index_errors(c):
    assert c.call("SELECT", "4294967296") == RespError(
        "ERR value is out of range, value must between -2147483648 and 2147483647")
    assert c.call("SELECT", "01") == E_NOTINT
    assert c.call("SELECT", "16") == RespError("ERR DB index is out of range")
    # both indexes are parsed before either is range-checked
    assert c.call("SWAPDB", "100", "x") == RespError("ERR invalid second DB index")
    assert c.call("SWAPDB", "4294967296", "0") == RespError("ERR invalid first DB index")
    assert c.call("SWAPDB", "0", "16") == RespError("ERR DB index is out of range")
    assert c.call("SWAPDB", "3", "3") == "OK"
    assert c.call("SET", "k", "v") == "OK"
    assert c.call("MOVE", "k", "0") == RespError(
        "ERR source and destination objects are the same")
    assert c.call("MOVE", "k", "16") == RespError("ERR DB index is out of range")
    assert c.call("MOVE", "missing", "0") == RespError(
        "ERR source and destination objects are the same")


def test_rename_to_itself(c):
    assert c.call("RENAME", "nokey", "nokey") == RespError("ERR no such key")
    assert c.call("RENAMENX", "nokey", "nokey") == RespError("ERR no such key")
    assert c.call("SET", "k", "v", "EX", "100") == "OK"
    assert c.call("RENAME", "k", "k") == "OK"
    assert c.call("RENAMENX", "k", "k") == 0
    assert c.call("TTL", "k") > 0


def test_multi_key_writes_with_repeated_keys(c):
    assert c.call("MSET", "a", "1", "a", "2") == "OK"
    assert c.call("GET", "a") == b"2"
    assert c.call("MSETNX", "p", "1", "p", "2") == 1
    assert c.call("GET", "p") == b"2"
    assert c.call("DEL", "a", "a", "p") == 2
    assert c.call("UNLINK", "x", "x") == 0
