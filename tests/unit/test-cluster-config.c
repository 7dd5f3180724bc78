/* test-cluster-config.c -- the configuration's text form (src/cluster/
 * cluster.c, what the CM writes to ZooKeeper): a node's native port
 * survives a round trip, nodes without one keep the older line (which a
 * decoder that predates native ports reads), such a line still decodes,
 * and a malformed native word is refused. */
#include <stdlib.h>
#include <string.h>
#include "cluster.h"
#include "unit.h"

static cluster_config *sample(void) {
    cluster_config *c = cluster_config_new(4);
    c->term = 7;
    c->k = 2;
    const char *names[3] = {"a", "b", "c"};
    int natives[3] = {41234, 0, 7};
    for (int i = 0; i < 3; i++) {
        cluster_node n;
        memset(&n, 0, sizeof(n));
        strcpy(n.name, names[i]);
        strcpy(n.host, "127.0.0.1");
        n.port = 7000 + i;
        n.repl_port = 17000 + i;
        n.native_port = natives[i];
        CHECK_EQ_LL(cluster_config_node(c, &n), i);
    }
    c->members = 0x5;   /* b is out */
    cluster_config_spread(c);
    return c;
}

static void test_round_trip(void) {
    cluster_config *c = sample();
    size_t len;
    char *text = cluster_config_encode(c, &len);
    CHECK(strstr(text, "node 0 a 127.0.0.1 7000 17000 native=41234 member\n") != NULL);
    CHECK(strstr(text, "node 1 b 127.0.0.1 7001 17001 out\n") != NULL);
    CHECK(strstr(text, "node 2 c 127.0.0.1 7002 17002 native=7 member\n") != NULL);
    char err[200];
    cluster_config *d = cluster_config_decode(text, len, err, sizeof(err));
    CHECK(d != NULL);
    if (d) {
        CHECK_EQ_LL(d->nnodes, 3);
        CHECK_EQ_LL(d->nodes[0].native_port, 41234);
        CHECK_EQ_LL(d->nodes[1].native_port, 0);
        CHECK_EQ_LL(d->nodes[2].native_port, 7);
        CHECK_EQ_LL(d->nodes[2].port, 7002);
        CHECK_EQ_LL(d->members, 0x5);
        CHECK_EQ_LL(d->term, 7);
        size_t len2;
        char *again = cluster_config_encode(d, &len2);
        CHECK(len2 == len && memcmp(again, text, len) == 0);
        free(again);
        cluster_config_free(d);
    }
    free(text);
    cluster_config_free(c);
}

static const char *with_node(const char *node_line) {
    static char buf[1024];
    snprintf(buf, sizeof(buf), "rowan-config 1\nterm 3\nreplicas 1\nshards 1\n%s\nshard 0 0 - -\n",
             node_line);
    return buf;
}

static void test_old_and_bad_lines(void) {
    char err[200];
    const char *t = with_node("node 0 a h 1 2 member");
    cluster_config *d = cluster_config_decode(t, strlen(t), err, sizeof(err));
    CHECK(d && d->nodes[0].native_port == 0 && d->members == 1);
    cluster_config_free(d);
    const char *bad[] = {"node 0 a h 1 2 native=0 member", "node 0 a h 1 2 native=70000 member",
                         "node 0 a h 1 2 native=12x member", "node 0 a h 1 2 nativ=12 member",
                         "node 0 a h 1 2 native=12 maybe", "node 0 a h 1 2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        t = with_node(bad[i]);
        d = cluster_config_decode(t, strlen(t), err, sizeof(err));
        CHECK(d == NULL);
        cluster_config_free(d);
    }
}

int main(void) {
    test_round_trip();
    test_old_and_bad_lines();
    return UNIT_DONE("test-cluster-config");
}
