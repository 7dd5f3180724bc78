"""The reported version (issue 12): INFO's redis_version and HELLO's version
are "the newest Redis version whose commands Rowan all implements".

The test computes that version from the live command tables, so it stays
honest as commands are added or removed: every command and subcommand of
the reference redis-server (Debian's 7.0, with its `since` from COMMAND
DOCS), plus the commands Redis 7.2 introduced (listed below from Redis's
documentation, as the reference server is older), is looked up in
rowan-server: a top-level command in its COMMAND reply, a subcommand by
asking for it (an "unknown subcommand" error means it is missing; CLUSTER's
are asked to a cluster node). Commands that Rowan replaces by its own
design are left out of the count, each group with its reason (README,
docs/DECISIONS.md "Reported version"). The version is then the newest
Redis release such that no in-scope command introduced up to it is
missing."""
import pytest

from conftest import Cluster, RespError, Server, _teardown_servers

# Introduced by Redis 7.2.0 (redis.io "Available since: 7.2.0"); the 7.0
# reference server cannot list them.
REDIS_72 = ["waitaof", "client|setinfo", "client|no-touch", "cluster|myshardid"]

# Out of scope by design (see DECISIONS.md "Reported version"):
OUT_OF_SCOPE = {
    # Redis's primary/replica replication protocol: Rowan replicates each
    # shard to backups with its own protocol, configured in rowan.conf.
    "sync", "psync", "replconf", "slaveof", "replicaof", "failover",
    # Redis modules: Rowan has no module API.
    "module", "module|list", "module|load", "module|loadex", "module|unload", "module|help",
    # The Lua debugger (LDB): a debugging session over the connection.
    "script|debug",
    # Redis Cluster's topology administration and gossip: Rowan's cluster
    # topology comes from its configuration or configuration manager.
    "cluster|addslots", "cluster|addslotsrange", "cluster|delslots", "cluster|delslotsrange",
    "cluster|flushslots", "cluster|setslot", "cluster|meet", "cluster|forget",
    "cluster|replicate", "cluster|reset", "cluster|saveconfig", "cluster|set-config-epoch",
    "cluster|bumpepoch", "cluster|count-failure-reports", "cluster|links",
    "cluster|replicas", "cluster|slaves",
}


def s_(x):
    return x.decode() if isinstance(x, bytes) else x


def vtuple(v):
    return tuple(int(x) for x in v.split("."))


def reference_commands(ref):
    """{name or container|sub: since} of the reference server, plus 7.2's."""
    since = {}

    def walk(flat):
        for i in range(0, len(flat), 2):
            doc = flat[i + 1]
            d = {s_(doc[j]): doc[j + 1] for j in range(0, len(doc), 2)}
            since[s_(flat[i]).lower()] = s_(d["since"])
            if d.get("subcommands"):
                walk(d["subcommands"])

    walk(ref.resp().call("COMMAND", "DOCS"))
    for name in REDIS_72:
        since.setdefault(name, "7.2.0")
    return since


def is_missing(cl, name, top):
    if "|" not in name:
        return name not in top
    container, sub = name.split("|")
    rep = cl.call(container, sub)
    return isinstance(rep, RespError) and (rep.msg.startswith("ERR unknown subcommand")
                                           or rep.msg.startswith("ERR unknown command"))


def newest_complete_version(since, missing):
    """The newest version V among `since` values such that no missing
    command was introduced at or before V."""
    versions = sorted({vtuple(v) for v in since.values()})
    first_gap = min((vtuple(since[n]) for n in missing), default=None)
    ok = [v for v in versions if first_gap is None or v < first_gap]
    return ".".join(map(str, ok[-1])) if ok else None


@pytest.fixture(scope="module")
def analysis(ref_srv):
    since = reference_commands(ref_srv)
    srv = Server("rowan")
    cl = None
    try:
        srv.start()
        cl = srv.resp()
        top = {s_(row[0]).lower() for row in cl.call("COMMAND")}
        cluster = Cluster(3)
        try:
            ccl = cluster.nodes[0].resp()
            absent = {n for n in since
                      if is_missing(ccl if n.startswith("cluster|") else cl, n, top)}
            missing = sorted(absent - OUT_OF_SCOPE, key=lambda n: (vtuple(since[n]), n))
        finally:
            cluster.stop()
        info = s_(cl.call("INFO", "server"))
        reported = [ln.split(":", 1)[1] for ln in info.split("\r\n")
                    if ln.startswith("redis_version:")][0]
        hello = cl.call("HELLO", "2")
        hello = {s_(hello[i]): hello[i + 1] for i in range(0, len(hello), 2)}
    finally:
        _teardown_servers([srv])
    return since, missing, reported, s_(hello["version"]), absent


def test_reported_version_is_the_newest_complete_one(analysis):
    since, missing, reported, hello_version, _absent = analysis
    expected = newest_complete_version(since, missing)
    assert reported == expected, (
        "INFO says %s but Rowan implements every in-scope command only up to %s; "
        "missing: %s" % (reported, expected, ", ".join("%s (%s)" % (n, since[n]) for n in missing)))
    assert hello_version == reported


def test_out_of_scope_commands_are_really_absent(analysis):
    # An excluded command that Rowan gains must leave OUT_OF_SCOPE (and the
    # README's list), or the exclusions would claim more than is true.
    since, _missing, _reported, _hello, absent = analysis
    assert OUT_OF_SCOPE <= set(since), sorted(OUT_OF_SCOPE - set(since))
    # SYNC and PSYNC exist only to refuse with an explanation (t_sync.c),
    # MODULE only to answer as a server without modules, whose LOAD always
    # fails (t_module.c): present in the table, still not implemented
    refused = {"sync", "psync", "module", "module|list", "module|load", "module|loadex",
               "module|unload", "module|help"}
    assert sorted(OUT_OF_SCOPE - absent - refused) == [], "implemented now: drop from OUT_OF_SCOPE"


def test_lolwut_answers_the_reported_version(ref_srv):
    srv = Server("rowan")
    try:
        srv.start()
        cl, ref = srv.resp(), ref_srv.resp()
        info = s_(cl.call("INFO", "server"))
        ver = [ln.split(":", 1)[1] for ln in info.split("\r\n") if ln.startswith("redis_version:")][0]
        for args in (["LOLWUT"], ["LOLWUT", "VERSION", "7"], ["LOLWUT", "foo"]):
            assert cl.call(*args) == ("Redis ver. %s\n" % ver).encode()
            assert s_(ref.call(*args)).startswith("Redis ver. ")
        assert cl.err("LOLWUT", "VERSION", "x") == ref.err("LOLWUT", "VERSION", "x")
    finally:
        _teardown_servers([srv])


def test_cluster_myshardid_is_the_node_id():
    cluster = Cluster(3)
    try:
        for nd in cluster.nodes:
            cl = nd.resp()
            shard_id = cl.call("CLUSTER", "MYSHARDID")
            assert shard_id == cl.call("CLUSTER", "MYID") and len(shard_id) == 40
            assert isinstance(cl.call("CLUSTER", "MYSHARDID", "x"), RespError)
    finally:
        cluster.stop()
