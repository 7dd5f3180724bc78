/* script_msgpack.c -- the `cmsgpack` table of Lua scripts (t_script.c).
 *
 * Debian packages no MessagePack module with this API for Lua 5.1, so it
 * is written here from the MessagePack specification and the API Redis
 * documents: cmsgpack.pack(v1, v2...) -> one string with every value
 * encoded in turn; cmsgpack.unpack(s) -> every value; unpack_one(s
 * [, offset]) and unpack_limit(s, limit [, offset]) -> the offset after
 * the values decoded (-1 at the end) followed by them.
 *
 * Encoding choices follow Redis's module so that bytes match: integral
 * numbers use the smallest integer form, others float 32 when exact, else
 * float 64; strings str8/16/32; a table whose keys are exactly 1..n is an
 * array, any other a map; tables nested deeper than 16 levels (or cycles)
 * encode as nil. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <lua5.1/lua.h>
#include <lua5.1/lauxlib.h>
#include "resp.h"

#define MSGPACK_MAX_NESTING 16

int luaopen_cmsgpack(lua_State *L);

/* ---------------- encoding ---------------- */

static void put_be(rbuf *b, int tag, uint64_t v, int bytes) {
    unsigned char h[9];
    int n = 0;
    if (tag >= 0) h[n++] = (unsigned char)tag;
    for (int i = bytes - 1; i >= 0; i--) h[n++] = (unsigned char)(v >> (8 * i));
    rbuf_append(b, h, (size_t)n);
}

static void enc_int(rbuf *b, int64_t v) {
    if (v >= 0) {
        if (v < 128) put_be(b, -1, (uint64_t)v, 1);
        else if (v <= 0xff) put_be(b, 0xcc, (uint64_t)v, 1);
        else if (v <= 0xffff) put_be(b, 0xcd, (uint64_t)v, 2);
        else if (v <= 0xffffffffLL) put_be(b, 0xce, (uint64_t)v, 4);
        else put_be(b, 0xcf, (uint64_t)v, 8);
    } else {
        if (v >= -32) put_be(b, -1, (uint64_t)(uint8_t)(int8_t)v, 1);
        else if (v >= -128) put_be(b, 0xd0, (uint64_t)(uint8_t)(int8_t)v, 1);
        else if (v >= -32768) put_be(b, 0xd1, (uint64_t)(uint16_t)(int16_t)v, 2);
        else if (v >= -2147483648LL) put_be(b, 0xd2, (uint64_t)(uint32_t)(int32_t)v, 4);
        else put_be(b, 0xd3, (uint64_t)v, 8);
    }
}

static void enc_number(rbuf *b, lua_Number n) {
    if (isfinite(n) && n == floor(n) && n >= -9.2e18 && n <= 1.8e19) {
        if (n >= 9.2e18) put_be(b, 0xcf, (uint64_t)n, 8);
        else enc_int(b, (int64_t)n);
        return;
    }
    float f = (float)n;
    if ((lua_Number)f == n) {
        uint32_t u;
        memcpy(&u, &f, 4);
        put_be(b, 0xca, u, 4);
    } else {
        double d = (double)n;
        uint64_t u;
        memcpy(&u, &d, 8);
        put_be(b, 0xcb, u, 8);
    }
}

static void enc_str(rbuf *b, const char *s, size_t len) {
    if (len < 32) put_be(b, -1, 0xa0 | len, 1);
    else if (len <= 0xff) put_be(b, 0xd9, len, 1);
    else if (len <= 0xffff) put_be(b, 0xda, len, 2);
    else put_be(b, 0xdb, len, 4);
    rbuf_append(b, s, len);
}

/* n > 0 when the table on top has exactly the keys 1..n (0: empty table,
 * an array too); -1 when it is a map. *count gets its number of keys. */
static long array_len(lua_State *L, long *count) {
    long n = 0, max = 0;
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        n++;
        if (lua_type(L, -1) == LUA_TNUMBER) {
            lua_Number k = lua_tonumber(L, -1);
            if (k > 0 && k == floor(k)) {
                if (k > max) max = (long)k;
                continue;
            }
        }
        max = -1; /* not an array key: finish counting */
        while (lua_next(L, -2)) {
            lua_pop(L, 1);
            n++;
        }
        break;
    }
    *count = n;
    return max >= 0 && max == n ? n : -1;
}

static void enc_value(lua_State *L, rbuf *b, int depth);

static void enc_table(lua_State *L, rbuf *b, int depth) {
    long count, n = array_len(L, &count);
    if (n >= 0) {
        if (n < 16) put_be(b, -1, 0x90 | (uint64_t)n, 1);
        else if (n <= 0xffff) put_be(b, 0xdc, (uint64_t)n, 2);
        else put_be(b, 0xdd, (uint64_t)n, 4);
        for (long i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, (int)i);
            enc_value(L, b, depth + 1);
            lua_pop(L, 1);
        }
        return;
    }
    if (count < 16) put_be(b, -1, 0x80 | (uint64_t)count, 1);
    else if (count <= 0xffff) put_be(b, 0xde, (uint64_t)count, 2);
    else put_be(b, 0xdf, (uint64_t)count, 4);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pushvalue(L, -2);
        enc_value(L, b, depth + 1);
        lua_pop(L, 1);
        enc_value(L, b, depth + 1);
        lua_pop(L, 1);
    }
}

static void enc_value(lua_State *L, rbuf *b, int depth) {
    size_t len;
    const char *s;
    switch (lua_type(L, -1)) {
    case LUA_TSTRING:
        s = lua_tolstring(L, -1, &len);
        enc_str(b, s, len);
        break;
    case LUA_TBOOLEAN:
        put_be(b, -1, lua_toboolean(L, -1) ? 0xc3 : 0xc2, 1);
        break;
    case LUA_TNUMBER:
        enc_number(b, lua_tonumber(L, -1));
        break;
    case LUA_TTABLE:
        if (depth < MSGPACK_MAX_NESTING && lua_checkstack(L, 4)) enc_table(L, b, depth);
        else put_be(b, -1, 0xc0, 1); /* too deep */
        break;
    default:
        put_be(b, -1, 0xc0, 1);
    }
}

static int mp_pack(lua_State *L) {
    int n = lua_gettop(L);
    if (n == 0) return luaL_argerror(L, 0, "MessagePack pack needs input.");
    rbuf b;
    rbuf_init(&b);
    for (int i = 1; i <= n; i++) {
        lua_pushvalue(L, i);
        enc_value(L, &b, 0);
        lua_pop(L, 1);
    }
    lua_pushlstring(L, b.buf ? b.buf : "", b.len);
    rbuf_free(&b);
    return 1;
}

/* ---------------- decoding ---------------- */

typedef struct cursor {
    const unsigned char *p;
    size_t left;
    int err;                 /* 1: truncated, 2: bad format */
} cursor;

static uint64_t get_be(cursor *c, int bytes) {
    if (c->left < (size_t)bytes) {
        c->err = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v = (v << 8) | c->p[i];
    c->p += bytes;
    c->left -= (size_t)bytes;
    return v;
}

static void dec_value(lua_State *L, cursor *c, int depth);

static void dec_bytes(lua_State *L, cursor *c, size_t len) {
    if (c->left < len) {
        c->err = 1;
        return;
    }
    lua_pushlstring(L, (const char *)c->p, len);
    c->p += len;
    c->left -= len;
}

static void dec_array(lua_State *L, cursor *c, uint64_t n, int depth) {
    lua_newtable(L);
    for (uint64_t i = 1; i <= n && !c->err; i++) {
        dec_value(L, c, depth + 1);
        if (c->err) return;
        lua_rawseti(L, -2, (int)i);
    }
}

static void dec_map(lua_State *L, cursor *c, uint64_t n, int depth) {
    lua_newtable(L);
    for (uint64_t i = 0; i < n && !c->err; i++) {
        dec_value(L, c, depth + 1);
        if (c->err) return;
        dec_value(L, c, depth + 1);
        if (c->err) return;
        if (lua_isnil(L, -2)) lua_pop(L, 2); /* a nil key cannot be stored */
        else lua_rawset(L, -3);
    }
}

static void dec_value(lua_State *L, cursor *c, int depth) {
    if (depth > 1000 || !lua_checkstack(L, 4)) {
        c->err = 2;
        return;
    }
    if (c->left == 0) {
        c->err = 1;
        return;
    }
    unsigned t = *c->p++;
    c->left--;
    if (t < 0x80) { lua_pushnumber(L, t); return; }
    if (t >= 0xe0) { lua_pushnumber(L, (int8_t)t); return; }
    if ((t & 0xf0) == 0x80) { dec_map(L, c, t & 0x0f, depth); return; }
    if ((t & 0xf0) == 0x90) { dec_array(L, c, t & 0x0f, depth); return; }
    if ((t & 0xe0) == 0xa0) { dec_bytes(L, c, t & 0x1f); return; }
    switch (t) {
    case 0xc0: lua_pushnil(L); return;
    case 0xc2: lua_pushboolean(L, 0); return;
    case 0xc3: lua_pushboolean(L, 1); return;
    case 0xcc: lua_pushnumber(L, (lua_Number)get_be(c, 1)); return;
    case 0xcd: lua_pushnumber(L, (lua_Number)get_be(c, 2)); return;
    case 0xce: lua_pushnumber(L, (lua_Number)get_be(c, 4)); return;
    case 0xcf: lua_pushnumber(L, (lua_Number)get_be(c, 8)); return;
    case 0xd0: lua_pushnumber(L, (int8_t)get_be(c, 1)); return;
    case 0xd1: lua_pushnumber(L, (int16_t)get_be(c, 2)); return;
    case 0xd2: lua_pushnumber(L, (int32_t)get_be(c, 4)); return;
    case 0xd3: lua_pushnumber(L, (lua_Number)(int64_t)get_be(c, 8)); return;
    case 0xca: {
        uint32_t u = (uint32_t)get_be(c, 4);
        float f;
        memcpy(&f, &u, 4);
        lua_pushnumber(L, f);
        return;
    }
    case 0xcb: {
        uint64_t u = get_be(c, 8);
        double d;
        memcpy(&d, &u, 8);
        lua_pushnumber(L, d);
        return;
    }
    case 0xc4: case 0xd9: { uint64_t n = get_be(c, 1); if (!c->err) dec_bytes(L, c, n); return; }
    case 0xc5: case 0xda: { uint64_t n = get_be(c, 2); if (!c->err) dec_bytes(L, c, n); return; }
    case 0xc6: case 0xdb: { uint64_t n = get_be(c, 4); if (!c->err) dec_bytes(L, c, n); return; }
    case 0xdc: { uint64_t n = get_be(c, 2); if (!c->err) dec_array(L, c, n, depth); return; }
    case 0xdd: { uint64_t n = get_be(c, 4); if (!c->err) dec_array(L, c, n, depth); return; }
    case 0xde: { uint64_t n = get_be(c, 2); if (!c->err) dec_map(L, c, n, depth); return; }
    case 0xdf: { uint64_t n = get_be(c, 4); if (!c->err) dec_map(L, c, n, depth); return; }
    default:
        c->err = 2;
    }
}

/* Decode up to limit values (0: all) from offset; with `offsets`, push
 * the offset after them first (-1 when the input is used up). */
static int mp_unpack_full(lua_State *L, long limit, long offset, int offsets) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    if (offset < 0 || limit < 0)
        return luaL_error(L, "Invalid request to unpack with offset of %d and limit of %d.",
                          (int)offset, (int)limit);
    if ((size_t)offset > len) offset = (long)len;
    cursor c = {(const unsigned char *)s + offset, len - (size_t)offset, 0};
    int base = lua_gettop(L), count = 0;
    while (c.left > 0 && (limit == 0 || count < limit)) {
        dec_value(L, &c, 0);
        if (c.err) break;
        count++;
    }
    if (c.err == 1) return luaL_error(L, "Missing bytes in input.");
    if (c.err == 2) return luaL_error(L, "Bad data format in input.");
    if (offsets) {
        lua_pushnumber(L, c.left ? (lua_Number)(len - c.left) : -1);
        lua_insert(L, base + 1);
        count++;
    }
    return count;
}

static int mp_unpack(lua_State *L) { return mp_unpack_full(L, 0, 0, 0); }

static int mp_unpack_one(lua_State *L) {
    long offset = (long)luaL_optnumber(L, 2, 0);
    lua_settop(L, 1);
    return mp_unpack_full(L, 1, offset, 1);
}

static int mp_unpack_limit(lua_State *L) {
    long limit = (long)luaL_checknumber(L, 2);
    long offset = (long)luaL_optnumber(L, 3, 0);
    lua_settop(L, 1);
    return mp_unpack_full(L, limit, offset, 1);
}

int luaopen_cmsgpack(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"pack", mp_pack},
        {"unpack", mp_unpack},
        {"unpack_one", mp_unpack_one},
        {"unpack_limit", mp_unpack_limit},
        {NULL, NULL},
    };
    lua_newtable(L);
    luaL_register(L, NULL, fns);
    lua_pushliteral(L, "lua-cmsgpack");
    lua_setfield(L, -2, "_NAME");
    return 1;
}
