/* script_struct.c -- the `struct` table of Lua scripts (t_script.c).
 *
 * Binary packing as Redis scripts know it (struct.pack, struct.unpack,
 * struct.size), written here from that library's documented format
 * language, since Debian ships no Lua 5.1 package of it:
 *
 *   > big endian, < little endian, ![n] alignment (n, or the native one),
 *   x one padding byte, b/B signed/unsigned char, h/H short, l/L long,
 *   T size_t, i/I[n] integers of n bytes (default int), f float, d double,
 *   s zero-terminated string, c[n] n characters (c0: pack the whole
 *   string; unpack a length given by the previous number). Spaces are
 *   ignored.
 *
 * unpack returns the values followed by the position after them. */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <lua5.1/lua.h>
#include <lua5.1/lauxlib.h>

#define MAXINTSIZE 32
#define NATIVE_ALIGN 8

int luaopen_struct(lua_State *L);

typedef struct fmt_state {
    int little;     /* little endian */
    int align;      /* maximum alignment (1: none) */
} fmt_state;

static int bad_option(lua_State *L, char opt) {
    return luaL_argerror(L, 1, lua_pushfstring(L, "invalid format option '%c'", opt));
}

static int host_little(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one;
}

static size_t read_num(const char **f, size_t dflt) {
    if (!isdigit((unsigned char)**f)) return dflt;
    size_t n = 0;
    while (isdigit((unsigned char)**f) && n < 100000) n = n * 10 + (size_t)(*(*f)++ - '0');
    return n;
}

/* The size of option opt (moving f past its digits); 0 for those without. */
static size_t opt_size(lua_State *L, char opt, const char **f) {
    switch (opt) {
    case 'B': case 'b': return 1;
    case 'H': case 'h': return sizeof(short);
    case 'L': case 'l': return sizeof(long);
    case 'T': return sizeof(size_t);
    case 'f': return sizeof(float);
    case 'd': return sizeof(double);
    case 'x': return 1;
    case 'c': return read_num(f, 1);
    case 'i': case 'I': {
        size_t n = read_num(f, sizeof(int));
        if (n == 0 || n > MAXINTSIZE)
            luaL_error(L, "integral size %d is larger than limit of %d", (int)n, MAXINTSIZE);
        return n;
    }
    default: return 0;
    }
}

/* Padding needed before an item of size `size` at offset `pos`. */
static size_t gap(const fmt_state *h, size_t size, size_t pos) {
    if (size <= 1 || h->align <= 1) return 0;
    size_t a = size < (size_t)h->align ? size : (size_t)h->align;
    if (a & (a - 1)) return 0; /* only powers of 2 align */
    return (a - (pos & (a - 1))) & (a - 1);
}

/* Options that change the state; returns 1 if opt was one. */
static int control(lua_State *L, char opt, const char **f, fmt_state *h) {
    switch (opt) {
    case ' ': return 1;
    case '>': h->little = 0; return 1;
    case '<': h->little = 1; return 1;
    case '!': {
        size_t a = read_num(f, NATIVE_ALIGN);
        if (a == 0 || (a & (a - 1))) luaL_error(L, "alignment %d is not a power of 2", (int)a);
        h->align = (int)a;
        return 1;
    }
    default: return 0;
    }
}

/* The packed string is built in a luaL_Buffer, which Lua frees itself if
 * a bad argument raises an error half way. len counts its bytes. */
typedef struct packbuf {
    luaL_Buffer lb;
    size_t len;
} packbuf;

static void pb_add(packbuf *b, const void *p, size_t n) {
    luaL_addlstring(&b->lb, p, n);
    b->len += n;
}

static void put_int(packbuf *b, uint64_t v, int little, size_t size) {
    unsigned char buf[MAXINTSIZE];
    for (size_t i = 0; i < size; i++) {
        unsigned char byte = i < 8 ? (unsigned char)(v >> (8 * i)) : ((int64_t)v < 0 ? 0xff : 0);
        buf[little ? i : size - 1 - i] = byte;
    }
    pb_add(b, buf, size);
}

static void put_raw(packbuf *b, const void *p, size_t size, int little) {
    unsigned char buf[16];
    memcpy(buf, p, size);
    if (little != host_little())
        for (size_t i = 0; i < size / 2; i++) {
            unsigned char t = buf[i];
            buf[i] = buf[size - 1 - i];
            buf[size - 1 - i] = t;
        }
    pb_add(b, buf, size);
}

static int s_pack(lua_State *L) {
    const char *f = luaL_checkstring(L, 1);
    fmt_state h = {host_little(), 1};
    int arg = 2;
    packbuf b = {.len = 0};
    luaL_buffinit(L, &b.lb);
    while (*f) {
        char opt = *f++;
        if (control(L, opt, &f, &h)) continue;
        size_t size = opt_size(L, opt, &f);
        size_t pad = gap(&h, size, b.len);
        while (pad--) pb_add(&b, "", 1);
        switch (opt) {
        case 'b': case 'B': case 'h': case 'H': case 'l': case 'L': case 'T':
        case 'i': case 'I': {
            lua_Number n = luaL_checknumber(L, arg++);
            uint64_t v = n < 0 ? (uint64_t)(int64_t)n : (uint64_t)n;
            put_int(&b, v, h.little, size);
            break;
        }
        case 'x':
            pb_add(&b, "", 1);
            break;
        case 'f': {
            float v = (float)luaL_checknumber(L, arg++);
            put_raw(&b, &v, sizeof(v), h.little);
            break;
        }
        case 'd': {
            double v = (double)luaL_checknumber(L, arg++);
            put_raw(&b, &v, sizeof(v), h.little);
            break;
        }
        case 'c': case 's': {
            size_t l;
            const char *s = luaL_checklstring(L, arg++, &l);
            if (opt == 'c' && size == 0) size = l;
            if (opt == 'c' && l < size) return luaL_argerror(L, arg - 1, "string too short");
            pb_add(&b, s, opt == 'c' ? size : l);
            if (opt == 's') pb_add(&b, "", 1);
            break;
        }
        default:
            return bad_option(L, opt);
        }
    }
    luaL_pushresult(&b.lb);
    return 1;
}

static lua_Number get_int(const unsigned char *p, int little, int is_signed, size_t size) {
    uint64_t v = 0;
    size_t n = size > 8 ? 8 : size;
    for (size_t i = 0; i < n; i++) {
        unsigned char byte = little ? p[n - 1 - i] : p[size - n + i];
        v = (v << 8) | byte;
    }
    if (is_signed && size < 8 && (v >> (8 * size - 1)) & 1) v |= ~(uint64_t)0 << (8 * size);
    return is_signed ? (lua_Number)(int64_t)v : (lua_Number)v;
}

static void get_raw(void *dst, const char *p, size_t size, int little) {
    unsigned char buf[16];
    memcpy(buf, p, size);
    if (little != host_little())
        for (size_t i = 0; i < size / 2; i++) {
            unsigned char t = buf[i];
            buf[i] = buf[size - 1 - i];
            buf[size - 1 - i] = t;
        }
    memcpy(dst, buf, size);
}

static int s_unpack(lua_State *L) {
    const char *f = luaL_checkstring(L, 1);
    size_t ld;
    const char *data = luaL_checklstring(L, 2, &ld);
    size_t pos = (size_t)luaL_optinteger(L, 3, 1) - 1;
    fmt_state h = {host_little(), 1};
    int n = 0;
    lua_settop(L, 3);
    while (*f) {
        char opt = *f++;
        if (control(L, opt, &f, &h)) continue;
        size_t size = opt_size(L, opt, &f);
        pos += gap(&h, size, pos);
        luaL_argcheck(L, pos <= ld && size <= ld - pos, 2, "data string too short");
        luaL_checkstack(L, 2, "too many results");
        switch (opt) {
        case 'b': case 'B': case 'h': case 'H': case 'l': case 'L': case 'T':
        case 'i': case 'I': {
            int is_signed = islower((unsigned char)opt);
            lua_pushnumber(L, get_int((const unsigned char *)data + pos, h.little, is_signed, size));
            n++;
            break;
        }
        case 'x':
            break;
        case 'f': {
            float v;
            get_raw(&v, data + pos, sizeof(v), h.little);
            lua_pushnumber(L, v);
            n++;
            break;
        }
        case 'd': {
            double v;
            get_raw(&v, data + pos, sizeof(v), h.little);
            lua_pushnumber(L, v);
            n++;
            break;
        }
        case 'c':
            if (size == 0) {
                if (n == 0 || !lua_isnumber(L, -1)) luaL_error(L, "format 'c0' needs a previous size");
                size = (size_t)lua_tonumber(L, -1);
                lua_pop(L, 1);
                n--;
                luaL_argcheck(L, size <= ld - pos, 2, "data string too short");
            }
            lua_pushlstring(L, data + pos, size);
            n++;
            break;
        case 's': {
            const char *e = memchr(data + pos, '\0', ld - pos);
            if (!e) luaL_error(L, "unfinished string in data");
            size = (size_t)(e - (data + pos)) + 1;
            lua_pushlstring(L, data + pos, size - 1);
            n++;
            break;
        }
        default:
            return bad_option(L, opt);
        }
        pos += size;
    }
    lua_pushinteger(L, (lua_Integer)pos + 1);
    return n + 1;
}

static int s_size(lua_State *L) {
    const char *f = luaL_checkstring(L, 1);
    fmt_state h = {host_little(), 1};
    size_t pos = 0;
    while (*f) {
        char opt = *f++;
        if (control(L, opt, &f, &h)) continue;
        size_t size = opt_size(L, opt, &f);
        pos += gap(&h, size, pos);
        if (opt == 's') luaL_argerror(L, 1, "options 's' has no fixed size");
        else if (opt == 'c' && size == 0) luaL_argerror(L, 1, "options 'c0' has no fixed size");
        pos += size;
    }
    lua_pushinteger(L, (lua_Integer)pos);
    return 1;
}

int luaopen_struct(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"pack", s_pack},
        {"unpack", s_unpack},
        {"size", s_size},
        {NULL, NULL},
    };
    lua_newtable(L);
    luaL_register(L, NULL, fns);
    return 1;
}
