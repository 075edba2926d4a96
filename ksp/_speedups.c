/* ksp._speedups: the decoder of ksp.codec in C, for valid messages only.
 *
 * Why: the pure-Python decoder spends its time creating one Python object per term, triple and
 * row (0.3-0.5 us each), which keeps it from the codec issue's targets. This module builds the
 * very same objects (ksp.terms and ksp.model types, handed over by codec.py at import) without
 * the interpreter in between, and interns terms by their bytes: a device sends the same IRIs and
 * readings over and over.
 *
 * It has one rule: return the message the Python decoder would return, or None. None means
 * "not a message I vouch for" (malformed bytes, or something rare left to Python), and codec.py
 * then runs the Python decoder, which raises the DecodeError with its status, path and reason.
 * So every error message stays in one place, and the Python decoder is this module's oracle
 * (tests/test_speedups.py compares the two on every vector and on random and mutated bytes).
 *
 * A REQ's prefix list (the PREFIX option) comes after the data it serves, so a REQ is read
 * twice: a first pass that only checks the layout and finds the prefix list, a second that
 * builds the objects. Both passes are the same functions (R.build says which).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef unsigned char uchar;

static inline unsigned le16(const uchar *p) { return p[0] | (p[1] << 8); }
static inline uint32_t le32(const uchar *p) { return le16(p) | ((uint32_t)le16(p + 2) << 16); }

/* ------------------------------------------------------------------------------------------ */
/* What codec.py hands over (setup()) */

static struct {
    PyTypeObject *IRI, *Literal, *Var, *BNode, *Triple, *Request, *Response, *Ack, *Options,
        *SelectResult, *ConstructResult;
    PyObject *AskResult, *SolutionModifier, *Bind, *Credentials; /* called (dataclasses) */
    PyObject *float_lexical;  /* literals.float_lexical(value) -> str */
    PyObject *xsd_integer, *xsd_float, *xsd_datetime, *xsd_boolean, *xsd_double;
    PyObject *str_true, *str_false;
    PyObject *reserved_code;      /* codes.RESERVED_CODE: IRI -> code */
    PyObject *compact_cache;      /* codec._compact_cache: Literal -> (kind, payload) */
    PyObject *compact_datatypes;  /* terms.COMPACT_DATATYPES */
    PyObject *is_lang_tag;    /* literals.is_lang_tag(tag) -> bool */
    PyObject *xsd_string, *rdf_langstring, *no_options, *empty_tuple;
    PyObject *tx_by_code[128];     /* Tx member or NULL */
    PyObject *status_by_code[128]; /* Status member or int */
    PyObject *op_by_code[256];     /* Op member or NULL */
    PyObject *order[3];            /* Order members */
    PyObject *vars[256];           /* Var(i) */
    PyObject *reserved[256];       /* reserved-word IRIs */
    int n_reserved;
    int op_arity[256];
    int op_bound;
    signed char layout[128][4];    /* field kinds per tx code, -1 ends */
    signed char layout_slot[128][4]; /* Request field index per entry */
    int allow_vars[128];
    unsigned int opts_allowed[128]; /* bit per option code */
    int tx_create;
    int version;
    int ready;
} K;

/* Request fields (checked against Request._fields by codec.py) */
enum { RQ_TX, RQ_TID, RQ_CON, RQ_DELETE, RQ_INSERT, RQ_WHERE, RQ_OPTIONAL, RQ_TEMPLATE,
       RQ_PROJECTION, RQ_GRAPHS, RQ_SOURCE, RQ_TARGET, RQ_OPTIONS, RQ_VERSION, RQ_N };
enum { FK_GRAPH, FK_PROJECTION, FK_OPTIONAL, FK_NAMES, FK_IRI };
enum { OP_PREFIX, OP_DELETE_GRAPH, OP_INSERT_GRAPH, OP_QUERY_GRAPH, OP_OPTIONAL, OP_FILTER,
       OP_MODIFIER, OP_BIND, OP_MAX_SIZE, OP_CREDENTIALS, OP_N };
enum { FORM_SELECT = 0x07, FORM_ASK = 0x08, FORM_CONSTRUCT = 0x09 };

/* ------------------------------------------------------------------------------------------ */
/* Term interning: a direct-mapped cache from bytes to an immutable term object */

#define CACHE_BITS 13
#define CACHE_SIZE (1u << CACHE_BITS)
#define CACHE_KEY_MAX 256

typedef struct {
    uint64_t hash;
    Py_ssize_t len;  /* -1: empty slot */
    PyObject *val;
    uchar key[CACHE_KEY_MAX];
} Slot;

static Slot *cache;
static int interning = 1; /* off only to measure what interning saves (tools/bench/codec.py) */

static inline uint64_t mix(uint64_t h, uint64_t w) {
    h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static uint64_t hash_bytes(uint64_t h, const uchar *p, Py_ssize_t n) {
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mix(h, w);
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, (size_t)n);
    return mix(h, w ^ ((uint64_t)n << 56));
}

/* Key = tag byte, then a, then b. Returns a new reference or NULL (not cached). */
typedef struct {
    uint64_t hash;
    Slot *slot;
    int cacheable;
} CacheKey;

static PyObject *cache_get(CacheKey *k, uchar tag, const uchar *a, Py_ssize_t alen,
                           const uchar *b, Py_ssize_t blen) {
    Py_ssize_t len = 1 + alen + blen;
    k->cacheable = interning && len <= CACHE_KEY_MAX;
    if (!k->cacheable)
        return NULL;
    uint64_t h = hash_bytes(hash_bytes(0x243F6A8885A308D3ULL ^ tag, a, alen), b, blen);
    Slot *s = &cache[h & (CACHE_SIZE - 1)];
    k->hash = h;
    k->slot = s;
    if (s->len == len && s->hash == h && s->key[0] == tag && memcmp(s->key + 1, a, alen) == 0 &&
        memcmp(s->key + 1 + alen, b, blen) == 0) {
        Py_INCREF(s->val);
        return s->val;
    }
    return NULL;
}

static void cache_put(CacheKey *k, uchar tag, const uchar *a, Py_ssize_t alen, const uchar *b,
                      Py_ssize_t blen, PyObject *val) {
    if (!k->cacheable)
        return;
    Slot *s = k->slot;
    PyObject *old = s->val;
    s->hash = k->hash;
    s->len = 1 + alen + blen;
    s->key[0] = tag;
    memcpy(s->key + 1, a, alen);
    memcpy(s->key + 1 + alen, b, blen);
    Py_INCREF(val);
    s->val = val;
    Py_XDECREF(old);
}

/* ------------------------------------------------------------------------------------------ */
/* Object builders */

/* A tuple subclass instance (NamedTuple) from n new references; steals them. */
static PyObject *named(PyTypeObject *type, Py_ssize_t n, PyObject **items) {
    PyObject *obj = type->tp_alloc(type, n);
    if (obj == NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(items[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(obj, i, items[i]);
    return obj;
}

static PyObject *named3(PyTypeObject *type, PyObject *a, PyObject *b, PyObject *c) {
    PyObject *items[3] = {a, b, c};
    return named(type, 3, items);
}

static PyObject *make_iri(const uchar *a, Py_ssize_t alen, const uchar *b, Py_ssize_t blen) {
    PyObject *text;
    if (alen == 0) {
        text = PyUnicode_DecodeUTF8((const char *)b, blen, "strict");
    } else {
        char small[512];
        char *joined = alen + blen <= (Py_ssize_t)sizeof small ? small : PyMem_Malloc(alen + blen);
        if (joined == NULL)
            return PyErr_NoMemory();
        memcpy(joined, a, alen);
        memcpy(joined + alen, b, blen);
        text = PyUnicode_DecodeUTF8(joined, alen + blen, "strict");
        if (joined != small)
            PyMem_Free(joined);
    }
    if (text == NULL)
        return NULL;
    PyObject *iri = PyObject_CallOneArg((PyObject *)K.IRI, text);
    Py_DECREF(text);
    return iri;
}

/* ------------------------------------------------------------------------------------------ */
/* The reader */

typedef struct {
    const uchar *buf;
    Py_ssize_t len;
    Py_ssize_t pos;
    int build;      /* 0: check the layout only, 1: build objects */
    int npfx;       /* -1: unknown yet (first pass) */
    const uchar *pfx_ptr[256];
    Py_ssize_t pfx_len[256];
    Py_ssize_t prefix_option; /* first pass: offset of the PREFIX option's count, or -1 */
    int opt_count;  /* the REQ's option count */
} R;

static void reader(R *r, const uchar *buf, Py_ssize_t len, Py_ssize_t pos, int build) {
    r->buf = buf;
    r->len = len;
    r->pos = pos;
    r->build = build;
    r->npfx = 0;
    r->prefix_option = -1;
}

#define NEED(r, n) do { if ((r)->len - (r)->pos < (Py_ssize_t)(n)) return -1; } while (0)

static int byte_at(R *r, int *out) {
    NEED(r, 1);
    *out = r->buf[r->pos++];
    return 0;
}

static int uri_len(R *r, Py_ssize_t *n) {
    NEED(r, 1);
    int b0 = r->buf[r->pos];
    if (b0 < 0x80) {
        r->pos += 1;
        *n = b0;
        return 0;
    }
    NEED(r, 2);
    Py_ssize_t v = (b0 & 0x7F) | (r->buf[r->pos + 1] << 7);
    if (v < 0x80)
        return -1;
    r->pos += 2;
    *n = v;
    return 0;
}

static int str_len(R *r, Py_ssize_t *n) {
    NEED(r, 1);
    int b0 = r->buf[r->pos];
    if (b0 < 0x40) {
        r->pos += 1;
        *n = b0;
        return 0;
    }
    int width = b0 >> 6;
    NEED(r, 1 + width);
    Py_ssize_t v = b0 & 0x3F;
    for (int i = 0; i < width; i++)
        v |= (Py_ssize_t)r->buf[r->pos + 1 + i] << (6 + 8 * i);
    static const Py_ssize_t minimum[3] = {0x40, 0x4000, 0x400000};
    if (v < minimum[width - 1])
        return -1;
    r->pos += 1 + width;
    *n = v;
    return 0;
}

/* Text of n bytes: a str when building (strict UTF-8, as bytes.decode), else only bounds. */
static int text(R *r, Py_ssize_t n, PyObject **out) {
    NEED(r, n);
    const uchar *p = r->buf + r->pos;
    r->pos += n;
    if (!r->build)
        return 0;
    *out = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    return *out ? 0 : -1;
}

/* A URI field (§4.1). */
static int uri(R *r, PyObject **out) {
    int index;
    Py_ssize_t n;
    if (byte_at(r, &index) || uri_len(r, &n))
        return -1;
    NEED(r, n);
    const uchar *local = r->buf + r->pos;
    r->pos += n;
    if (!r->build)
        return 0;
    const uchar *pre = NULL;
    Py_ssize_t plen = 0;
    if (index) {
        if (index > r->npfx)
            return -1;
        pre = r->pfx_ptr[index - 1];
        plen = r->pfx_len[index - 1];
    }
    CacheKey k;
    PyObject *iri = cache_get(&k, 'I', pre, plen, local, n);
    if (iri == NULL) {
        iri = make_iri(pre, plen, local, n);
        if (iri == NULL)
            return -1;
        cache_put(&k, 'I', pre, plen, local, n, iri);
    }
    *out = iri;
    return 0;
}

static const int FIXED_SIZE[8] = {-1, 4, 4, 19, 1, -1, -1, 8};

static int digits(const uchar *p, int n) {
    for (int i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return 0;
    return 1;
}

/* literals.is_datetime19: YYYY-MM-DDThh:mm:ss with months 01-12, days 01-31, hours 00-23. */
static int is_datetime19(const uchar *p) {
    if (!digits(p, 4) || p[4] != '-' || !digits(p + 5, 2) || p[7] != '-' || !digits(p + 8, 2) ||
        p[10] != 'T' || !digits(p + 11, 2) || p[13] != ':' || !digits(p + 14, 2) || p[16] != ':' ||
        !digits(p + 17, 2))
        return 0;
    int month = (p[5] - '0') * 10 + p[6] - '0', day = (p[8] - '0') * 10 + p[9] - '0';
    int hour = (p[11] - '0') * 10 + p[12] - '0';
    return month >= 1 && month <= 12 && day >= 1 && day <= 31 && hour <= 23 && p[14] <= '5' &&
           p[17] <= '5';
}

/* terms.double_lexical: repr(), or INF, -INF, NaN. */
static PyObject *double_lexical(double v) {
    if (Py_IS_NAN(v))
        return PyUnicode_FromString("NaN");
    if (Py_IS_INFINITY(v))
        return PyUnicode_FromString(v > 0 ? "INF" : "-INF");
    char *text = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL)
        return NULL;
    PyObject *s = PyUnicode_FromString(text);
    PyMem_Free(text);
    return s;
}

/* codec._fixed_literal: the Literal of a fixed-size payload (literal types 1-4 and 7). */
static PyObject *fixed_literal(int kind, const uchar *p) {
    PyObject *lex = NULL, *datatype = NULL;
    uint32_t u32 = le32(p);
    switch (kind) {
    case 1:
        lex = PyUnicode_FromFormat("%d", (int)(int32_t)u32);
        datatype = K.xsd_integer;
        break;
    case 2: {
        float f;
        memcpy(&f, &u32, 4);
        PyObject *value = PyFloat_FromDouble((double)f);
        if (value == NULL)
            return NULL;
        lex = PyObject_CallOneArg(K.float_lexical, value); /* shortest binary32 digits */
        Py_DECREF(value);
        datatype = K.xsd_float;
        break;
    }
    case 3:
        if (!is_datetime19(p))
            return NULL;
        lex = PyUnicode_DecodeASCII((const char *)p, 19, "strict");
        datatype = K.xsd_datetime;
        break;
    case 4:
        lex = Py_NewRef(p[0] ? K.str_true : K.str_false);
        datatype = K.xsd_boolean;
        break;
    default: {
        uint64_t u64 = u32 | ((uint64_t)le32(p + 4) << 32);
        double d;
        memcpy(&d, &u64, 8);
        lex = double_lexical(d);
        datatype = K.xsd_double;
    }
    }
    if (lex == NULL)
        return NULL;
    Py_INCREF(datatype);
    Py_INCREF(Py_None);
    return named3(K.Literal, lex, datatype, Py_None);
}

/* A Literal field (§4.2) starting at its literal-type byte. */
static int literal(R *r, PyObject **out) {
    int kind;
    if (byte_at(r, &kind))
        return -1;
    if (kind < 8 && FIXED_SIZE[kind] > 0) {
        Py_ssize_t size = FIXED_SIZE[kind];
        NEED(r, size);
        const uchar *raw = r->buf + r->pos - 1; /* with the kind byte, as codec's cache key */
        r->pos += size;
        if (kind == 4 && raw[1] > 1)
            return -1;
        CacheKey k;
        PyObject *lit = cache_get(&k, 'L', raw, size + 1, NULL, 0);
        if (lit == NULL) {
            lit = fixed_literal(kind, raw + 1);
            if (lit == NULL)
                return -1;
            cache_put(&k, 'L', raw, size + 1, NULL, 0, lit);
        }
        if (r->build)
            *out = lit;
        else
            Py_DECREF(lit);
        return 0;
    }
    Py_ssize_t n;
    if (kind == 0) {
        if (str_len(r, &n))
            return -1;
        NEED(r, n);
        const uchar *p = r->buf + r->pos;
        r->pos += n;
        if (!r->build)
            return 0;
        CacheKey k;
        PyObject *lit = cache_get(&k, 'S', p, n, NULL, 0);
        if (lit == NULL) {
            PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
            if (s == NULL)
                return -1;
            Py_INCREF(K.xsd_string);
            Py_INCREF(Py_None);
            lit = named3(K.Literal, s, K.xsd_string, Py_None);
            if (lit == NULL)
                return -1;
            cache_put(&k, 'S', p, n, NULL, 0, lit);
        }
        *out = lit;
        return 0;
    }
    if (kind == 5) {
        int tag_len;
        PyObject *tag = NULL, *lex = NULL;
        if (byte_at(r, &tag_len) || text(r, tag_len, &tag))
            return -1;
        if (r->build) {
            PyObject *ok = PyObject_CallOneArg(K.is_lang_tag, tag);
            int truth = ok ? PyObject_IsTrue(ok) : -1;
            Py_XDECREF(ok);
            if (truth != 1) {
                Py_DECREF(tag);
                return -1;
            }
        }
        if (str_len(r, &n) || text(r, n, &lex)) {
            Py_XDECREF(tag);
            return -1;
        }
        if (r->build) {
            Py_INCREF(K.rdf_langstring);
            *out = named3(K.Literal, lex, K.rdf_langstring, tag);
            return *out ? 0 : -1;
        }
        return 0;
    }
    if (kind == 6) {
        PyObject *datatype = NULL, *lex = NULL;
        if (uri(r, &datatype))
            return -1;
        if (r->build) {
            int bad = PyUnicode_GET_LENGTH(datatype) == 0 ||
                      PyUnicode_Compare(datatype, K.rdf_langstring) == 0;
            if (bad) {
                Py_DECREF(datatype);
                return -1;
            }
        }
        if (str_len(r, &n) || text(r, n, &lex)) {
            Py_XDECREF(datatype);
            return -1;
        }
        if (r->build) {
            Py_INCREF(Py_None);
            *out = named3(K.Literal, lex, datatype, Py_None);
            return *out ? 0 : -1;
        }
        return 0;
    }
    return -1;
}

/* A non-Empty triple member or result term of member type `code` (1-5). */
static int member(R *r, int code, PyObject **out) {
    int b;
    switch (code) {
    case 1:
        return uri(r, out);
    case 4:
        return literal(r, out);
    case 3:
        if (byte_at(r, &b))
            return -1;
        if (r->build) {
            *out = K.vars[b];
            Py_INCREF(*out);
        }
        return 0;
    case 2:
        if (byte_at(r, &b) || b >= K.n_reserved)
            return -1;
        if (r->build) {
            *out = K.reserved[b];
            Py_INCREF(*out);
        }
        return 0;
    case 5: {
        Py_ssize_t n;
        PyObject *label = NULL;
        if (uri_len(r, &n) || n == 0 || text(r, n, &label))
            return -1;
        if (r->build) {
            *out = named(K.BNode, 1, &label);
            return *out ? 0 : -1;
        }
        return 0;
    }
    }
    return -1;
}

/* `count` Triple fields as a tuple (§5.0). */
static int triples(R *r, Py_ssize_t count, int allow_vars, PyObject **out) {
    PyObject *result = NULL;
    if (r->build) {
        result = PyTuple_New(count);
        if (result == NULL)
            return -1;
    }
    PyObject *prev[3] = {NULL, NULL, NULL}; /* borrowed from the previous triple */
    for (Py_ssize_t i = 0; i < count; i++) {
        int b;
        if (byte_at(r, &b))
            goto fail;
        int codes[3] = {b & 7, (b >> 3) & 3, b >> 5};
        if (codes[0] == 4 || codes[0] > 5 || codes[2] > 5)
            goto fail;
        if (i == 0 && !(codes[0] && codes[1] && codes[2]))
            goto fail;
        if (!allow_vars && (codes[0] == 3 || codes[1] == 3 || codes[2] == 3))
            goto fail;
        PyObject *m[3] = {NULL, NULL, NULL};
        for (int k = 0; k < 3; k++) {
            if (codes[k]) {
                if (member(r, codes[k], &m[k])) {
                    Py_XDECREF(m[0]);
                    Py_XDECREF(m[1]);
                    goto fail;
                }
            } else if (r->build) {
                m[k] = prev[k];
                Py_INCREF(m[k]);
            }
        }
        if (r->build) {
            PyObject *t = named3(K.Triple, m[0], m[1], m[2]);
            if (t == NULL)
                goto fail;
            PyTuple_SET_ITEM(result, i, t);
            prev[0] = m[0];
            prev[1] = m[1];
            prev[2] = m[2];
        }
    }
    if (r->build)
        *out = result;
    return 0;
fail:
    Py_XDECREF(result);
    return -1;
}

static int graph(R *r, int allow_vars, PyObject **out) {
    int count;
    if (byte_at(r, &count))
        return -1;
    return triples(r, count, allow_vars, out);
}

/* A tuple of `count` items read by `item` (a NULL tuple in the first pass). */
typedef int (*ItemFn)(R *r, void *arg, PyObject **out);

static int items(R *r, Py_ssize_t count, ItemFn item, void *arg, PyObject **out) {
    PyObject *result = NULL;
    if (r->build && (result = PyTuple_New(count)) == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *value = NULL;
        if (item(r, arg, &value)) {
            Py_XDECREF(result);
            return -1;
        }
        if (r->build)
            PyTuple_SET_ITEM(result, i, value);
    }
    if (r->build)
        *out = result;
    return 0;
}

static int graph_item(R *r, void *allow_vars, PyObject **out) {
    return graph(r, *(int *)allow_vars, out);
}

static int uri_item(R *r, void *unused, PyObject **out) {
    (void)unused;
    return uri(r, out);
}

/* An RPN expression (§8): tokens, then the same arity check as codec._check_rpn. */
static int expression(R *r, void *unused, PyObject **out) {
    (void)unused;
    int count;
    if (byte_at(r, &count) || count == 0)
        return -1;
    PyObject *result = NULL;
    if (r->build && (result = PyTuple_New(count)) == NULL)
        return -1;
    int depth = 0, prev_var = 0;
    for (int i = 0; i < count; i++) {
        int code, is_var = 0;
        PyObject *token = NULL;
        if (byte_at(r, &code))
            goto fail;
        if (code == 0x05) { /* variable */
            int index;
            if (byte_at(r, &index))
                goto fail;
            if (r->build) {
                token = K.vars[index];
                Py_INCREF(token);
            }
            is_var = 1;
            depth += 1;
        } else if (code == 0x06) { /* URI */
            if (uri(r, &token))
                goto fail;
            depth += 1;
        } else if (code <= 0x04) { /* literal, the code being its literal type */
            r->pos -= 1;
            if (literal(r, &token))
                goto fail;
            depth += 1;
        } else if (code == 0x18) { /* any literal */
            if (literal(r, &token))
                goto fail;
            depth += 1;
        } else {
            PyObject *op = K.op_by_code[code];
            if (op == NULL)
                goto fail;
            if (code == K.op_bound && !prev_var)
                goto fail;
            int arity = K.op_arity[code];
            if (depth < arity)
                goto fail;
            depth -= arity - 1;
            if (r->build) {
                token = op;
                Py_INCREF(token);
            }
        }
        prev_var = is_var;
        if (r->build)
            PyTuple_SET_ITEM(result, i, token);
    }
    if (depth != 1)
        goto fail;
    if (r->build)
        *out = result;
    return 0;
fail:
    Py_XDECREF(result);
    return -1;
}

static int bind_item(R *r, void *unused, PyObject **out) {
    int var;
    PyObject *expr = NULL;
    if (byte_at(r, &var) || expression(r, unused, &expr))
        return -1;
    if (!r->build)
        return 0;
    PyObject *var_obj = PyLong_FromLong(var);
    if (var_obj == NULL) {
        Py_DECREF(expr);
        return -1;
    }
    PyObject *args[2] = {var_obj, expr};
    *out = PyObject_Vectorcall(K.Bind, args, 2, NULL);
    Py_DECREF(var_obj);
    Py_DECREF(expr);
    return *out ? 0 : -1;
}

/* One prefix-list entry: a URI field with prefix index 0 and a non-empty string. */
static int prefix_entry(R *r, int i, PyObject **out) {
    int index;
    Py_ssize_t n;
    if (byte_at(r, &index) || index != 0 || uri_len(r, &n) || n == 0)
        return -1;
    NEED(r, n);
    r->pfx_ptr[i] = r->buf + r->pos;
    r->pfx_len[i] = n;
    r->pos += n;
    if (!r->build)
        return 0;
    *out = PyUnicode_DecodeUTF8((const char *)r->pfx_ptr[i], n, "strict");
    return *out ? 0 : -1;
}

/* A prefix list (count, then entries) as a tuple of str; the reader resolves against it. */
static PyObject *prefix_list(R *r) {
    int n;
    if (byte_at(r, &n))
        return NULL;
    PyObject *prefixes = PyTuple_New(n);
    if (prefixes == NULL)
        return NULL;
    for (int j = 0; j < n; j++) {
        PyObject *entry;
        if (prefix_entry(r, j, &entry)) {
            Py_DECREF(prefixes);
            return NULL;
        }
        PyTuple_SET_ITEM(prefixes, j, entry);
    }
    r->npfx = n;
    return prefixes;
}

static PyObject *u16(const uchar *p) { return PyLong_FromLong(le16(p)); }

static int modifier(R *r, PyObject **out) {
    int flags, order_var = -1;
    if (byte_at(r, &flags))
        return -1;
    int order = flags & 3;
    if ((flags & 0xE0) || order == 3)
        return -1;
    if (order && byte_at(r, &order_var))
        return -1;
    const uchar *limit = NULL, *offset = NULL;
    if (flags & 4) {
        NEED(r, 2);
        limit = r->buf + r->pos;
        r->pos += 2;
    }
    if (flags & 8) {
        NEED(r, 2);
        offset = r->buf + r->pos;
        r->pos += 2;
    }
    if (!r->build)
        return 0;
    PyObject *args[5] = {K.order[order], NULL, NULL, NULL, (flags & 16) ? Py_True : Py_False};
    args[1] = order ? PyLong_FromLong(order_var) : Py_NewRef(Py_None);
    args[2] = limit ? u16(limit) : Py_NewRef(Py_None);
    args[3] = offset ? u16(offset) : Py_NewRef(Py_None);
    *out = (args[1] && args[2] && args[3]) ? PyObject_Vectorcall(K.SolutionModifier, args, 5, NULL)
                                           : NULL;
    Py_XDECREF(args[1]);
    Py_XDECREF(args[2]);
    Py_XDECREF(args[3]);
    return *out ? 0 : -1;
}

/* The options of a REQ (§7); values[] by option code, new references. */
static int options(R *r, int tx, PyObject **values) {
    int count;
    if (byte_at(r, &count))
        return -1;
    r->opt_count = count;
    unsigned int seen = 0;
    int allow_vars = K.allow_vars[tx];
    for (int i = 0; i < count; i++) {
        int code;
        if (byte_at(r, &code) || code >= OP_N || !(K.opts_allowed[tx] & (1u << code)) ||
            (seen & (1u << code)))
            return -1;
        seen |= 1u << code;
        PyObject **value = &values[code];
        if (code == OP_MAX_SIZE) {
            NEED(r, 4);
            const uchar *p = r->buf + r->pos;
            r->pos += 4;
            if (r->build) {
                if ((*value = PyLong_FromUnsignedLong(le32(p))) == NULL)
                    return -1;
            }
        } else if (code == OP_CREDENTIALS) {
            NEED(r, 17);
            const uchar *kp_id = r->buf + r->pos;
            int plen = kp_id[16];
            r->pos += 17;
            PyObject *password = NULL;
            if (text(r, plen, &password))
                return -1;
            if (r->build) {
                PyObject *id = PyBytes_FromStringAndSize((const char *)kp_id, 16);
                if (id == NULL) {
                    Py_DECREF(password);
                    return -1;
                }
                PyObject *args[2] = {id, password};
                *value = PyObject_Vectorcall(K.Credentials, args, 2, NULL);
                Py_DECREF(id);
                Py_DECREF(password);
                if (*value == NULL)
                    return -1;
            }
        } else if (code == OP_MODIFIER) {
            if (modifier(r, value))
                return -1;
        } else {
            int n;
            if (byte_at(r, &n) || n == 0)
                return -1;
            int rc;
            if (code == OP_PREFIX) {
                if (!r->build) {
                    r->prefix_option = r->pos - 1;
                    for (int j = 0; j < n; j++)
                        if (prefix_entry(r, j, NULL))
                            return -1;
                    rc = 0;
                } else {
                    /* the second pass already holds the prefix list: skip its bytes */
                    for (int j = 0; j < n; j++) {
                        Py_ssize_t len;
                        r->pos += 1;
                        if (uri_len(r, &len))
                            return -1;
                        r->pos += len;
                    }
                    *value = NULL; /* filled in by the caller */
                    rc = 0;
                }
            } else if (code == OP_OPTIONAL) {
                rc = items(r, n, graph_item, &allow_vars, value);
            } else if (code == OP_FILTER) {
                rc = items(r, n, expression, NULL, value);
            } else if (code == OP_BIND) {
                rc = items(r, n, bind_item, NULL, value);
            } else {
                rc = items(r, n, uri_item, NULL, value);
            }
            if (rc)
                return -1;
        }
    }
    return r->pos == r->len ? 0 : -1;
}

/* The data fields of a REQ (§5) into fields[] by Request field index. */
static int data_fields(R *r, int tx, PyObject **fields) {
    int allow_vars = K.allow_vars[tx];
    for (int i = 0; i < 4 && K.layout[tx][i] >= 0; i++) {
        PyObject **value = &fields[(int)K.layout_slot[tx][i]];
        int n;
        switch (K.layout[tx][i]) {
        case FK_GRAPH:
            if (graph(r, allow_vars, value))
                return -1;
            break;
        case FK_PROJECTION:
            if (byte_at(r, &n))
                return -1;
            if (r->build && (*value = PyLong_FromLong(n)) == NULL)
                return -1;
            break;
        case FK_OPTIONAL:
            if (byte_at(r, &n) || items(r, n, graph_item, &allow_vars, value))
                return -1;
            break;
        case FK_NAMES:
            if (byte_at(r, &n) || n == 0 || items(r, n, uri_item, NULL, value))
                return -1;
            if (r->build && tx == K.tx_create) {
                for (int j = 0; j < n; j++)
                    if (PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(*value, j)) == 0)
                        return -1;
            }
            break;
        default:
            if (uri(r, value))
                return -1;
        }
    }
    return 0;
}

static int header(const uchar *buf, Py_ssize_t len, int tcp, Py_ssize_t *pos) {
    if (tcp) {
        if (len < 8)
            return -1;
        if ((Py_ssize_t)le32(buf + 4) != len)
            return -1;
        *pos = 8;
    } else {
        if (len < 4)
            return -1;
        *pos = 4;
    }
    return buf[0] == K.version ? 0 : -1;
}

static void clear(PyObject **values, int n) {
    for (int i = 0; i < n; i++)
        Py_CLEAR(values[i]);
}

static PyObject *decode_request(const uchar *buf, Py_ssize_t len, int tcp) {
    Py_ssize_t pos;
    if (header(buf, len, tcp, &pos))
        Py_RETURN_NONE;
    int type_byte = buf[1], code = type_byte & 0x7F, tid = (int)le16(buf + 2);
    if (code == 0) {
        if (type_byte || tcp)
            Py_RETURN_NONE;
        PyObject *items[3] = {PyLong_FromLong(tid), NULL, PyLong_FromLong(K.version)};
        if (len - pos == 0)
            items[1] = Py_NewRef(Py_None);
        else if (len - pos == 2)
            items[1] = u16(buf + pos);
        if (items[1] == NULL) {
            Py_XDECREF(items[0]);
            Py_XDECREF(items[2]);
            Py_RETURN_NONE;
        }
        return named(K.Ack, 3, items);
    }
    if (K.tx_by_code[code] == NULL)
        Py_RETURN_NONE;

    R reading, *r = &reading;
    PyObject *fields[RQ_N] = {NULL};
    PyObject *opts[OP_N] = {NULL};
    PyObject *result = NULL;
    /* first pass: the layout, and where the prefix list is */
    reader(r, buf, len, pos, 0);
    if (data_fields(r, code, fields) || options(r, code, opts))
        goto bad;
    PyObject *prefixes = NULL;
    if (r->prefix_option >= 0) {
        r->build = 1;
        r->pos = r->prefix_option;
        if ((prefixes = prefix_list(r)) == NULL)
            goto bad;
    }
    /* second pass: the objects */
    r->build = 1;
    r->pos = pos;
    if (data_fields(r, code, fields) || options(r, code, opts)) {
        Py_XDECREF(prefixes);
        goto bad;
    }
    PyObject *options_obj;
    if (r->opt_count == 0) {
        options_obj = Py_NewRef(K.no_options); /* as codec's NO_OPTIONS_DECODED */
    } else {
        opts[OP_PREFIX] = prefixes ? prefixes : Py_NewRef(K.empty_tuple);
        for (int i = 1; i < OP_N; i++)
            if (opts[i] == NULL)
                opts[i] = Py_NewRef(Py_None);
        options_obj = named(K.Options, OP_N, opts);
        memset(opts, 0, sizeof opts);
        if (options_obj == NULL)
            goto bad;
    }
    fields[RQ_TX] = Py_NewRef(K.tx_by_code[code]);
    fields[RQ_TID] = PyLong_FromLong(tid);
    fields[RQ_CON] = Py_NewRef(type_byte > 0x7F ? Py_True : Py_False);
    fields[RQ_OPTIONS] = options_obj;
    fields[RQ_VERSION] = PyLong_FromLong(K.version);
    for (int i = 0; i < RQ_N; i++)
        if (fields[i] == NULL)
            fields[i] = Py_NewRef(Py_None);
    result = named(K.Request, RQ_N, fields);
    if (result != NULL)
        return result;
    PyErr_Clear();
    Py_RETURN_NONE;
bad:
    clear(fields, RQ_N);
    clear(opts, OP_N);
    PyErr_Clear();
    Py_RETURN_NONE;
}

/* The Data field of a SELECT/CONSTRUCT/ASK result (§6). */
static PyObject *result_at(R *r, int form) {
    if (form == FORM_ASK) {
        int b;
        if (byte_at(r, &b) || b > 1)
            return NULL;
        PyObject *arg = b ? Py_True : Py_False;
        return PyObject_CallOneArg(K.AskResult, arg);
    }
    PyObject *prefixes = prefix_list(r);
    if (prefixes == NULL)
        return NULL;
    if (r->len - r->pos < 4) {
        Py_DECREF(prefixes);
        return NULL;
    }
    const uchar *p = r->buf + r->pos;
    int total = (int)le16(p), count = (int)le16(p + 2);
    r->pos += 4;
    if (count > total) {
        Py_DECREF(prefixes);
        return NULL;
    }
    PyObject *items[4] = {NULL, NULL, NULL, NULL};
    if (form == FORM_CONSTRUCT) {
        if (triples(r, count, 0, &items[0])) {
            Py_DECREF(prefixes);
            return NULL;
        }
        items[1] = PyLong_FromLong(total);
        items[2] = prefixes;
        if (items[1] == NULL) {
            Py_DECREF(items[0]);
            Py_DECREF(prefixes);
            return NULL;
        }
        return named(K.ConstructResult, 3, items);
    }
    int variables;
    if (byte_at(r, &variables)) {
        Py_DECREF(prefixes);
        return NULL;
    }
    PyObject *rows = PyTuple_New(count);
    if (rows == NULL) {
        Py_DECREF(prefixes);
        return NULL;
    }
    for (int i = 0; i < count; i++) {
        PyObject *row = PyTuple_New(variables);
        if (row == NULL)
            goto fail;
        PyTuple_SET_ITEM(rows, i, row);
        for (int v = 0; v < variables; v++) {
            int code;
            PyObject *term;
            if (byte_at(r, &code) || code == 3)
                goto fail;
            if (code == 0)
                term = Py_NewRef(Py_None);
            else if (member(r, code, &term))
                goto fail;
            PyTuple_SET_ITEM(row, v, term);
        }
    }
    items[0] = PyLong_FromLong(variables);
    items[1] = rows;
    items[2] = PyLong_FromLong(total);
    items[3] = prefixes;
    if (items[0] == NULL || items[2] == NULL) {
        clear(items, 4);
        return NULL;
    }
    return named(K.SelectResult, 4, items);
fail:
    Py_DECREF(rows);
    Py_DECREF(prefixes);
    return NULL;
}

static PyObject *decode_response(const uchar *buf, Py_ssize_t len, int tcp, int form) {
    Py_ssize_t pos;
    if (header(buf, len, tcp, &pos))
        Py_RETURN_NONE;
    int type_byte = buf[1], tid = (int)le16(buf + 2);
    int indication = type_byte > 0x7F;
    PyObject *seq = NULL;
    if (indication && !tcp) {
        if (len < 6)
            Py_RETURN_NONE;
        seq = u16(buf + 4);
        if (seq == NULL)
            return NULL;
        pos = 6;
    } else {
        seq = Py_NewRef(Py_None);
    }
    int status = type_byte & 0x7F;
    PyObject *result;
    if (status || form < 0) {
        if (pos != len) {
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
        result = Py_NewRef(Py_None);
    } else {
        R r;
        reader(&r, buf, len, pos, 1);
        result = result_at(&r, form);
        if (result != NULL && r.pos != len)
            Py_CLEAR(result);
        if (result == NULL) {
            PyErr_Clear();
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
    }
    PyObject *items[6] = {PyLong_FromLong(tid), Py_NewRef(K.status_by_code[status]), result,
                          Py_NewRef(indication ? Py_True : Py_False), seq,
                          PyLong_FromLong(K.version)};
    if (items[0] == NULL || items[5] == NULL) {
        clear(items, 6);
        return NULL;
    }
    return named(K.Response, 6, items);
}


/* ------------------------------------------------------------------------------------------ */
/* The encoder, for requests without options other than PREFIX, and RESs/INDs/ACKs without a
 * result: what a device client sends and what answers it. Same rule as the decoder: the bytes
 * codec.encode writes, or None, and codec.encode then answers (with the EncodeError, if any).
 * Literals other than plain strings come from codec's _compact_cache, which the Python encoder
 * fills: a literal not yet there sends its message through Python once. */

typedef struct {
    uchar *p;
    Py_ssize_t len, cap;
    uchar small[512];
} Out;

static int grow(Out *o, Py_ssize_t n) {
    if (o->len + n <= o->cap)
        return 0;
    Py_ssize_t cap = (o->len + n) * 2;
    uchar *p = o->p == o->small ? PyMem_Malloc(cap) : PyMem_Realloc(o->p, cap);
    if (p == NULL)
        return -1;
    if (o->p == o->small)
        memcpy(p, o->small, o->len);
    o->p = p;
    o->cap = cap;
    return 0;
}

static int put(Out *o, const void *data, Py_ssize_t n) {
    if (grow(o, n))
        return -1;
    memcpy(o->p + o->len, data, n);
    o->len += n;
    return 0;
}

static int put_byte(Out *o, int b) {
    uchar c = (uchar)b;
    return put(o, &c, 1);
}

static int put_uri_len(Out *o, Py_ssize_t n) {
    if (n < 0x80)
        return put_byte(o, (int)n);
    if (n >= 0x8000)
        return -1;
    uchar b[2] = {(uchar)(0x80 | (n & 0x7F)), (uchar)(n >> 7)};
    return put(o, b, 2);
}

static int put_str(Out *o, const char *text, Py_ssize_t n) {
    uchar b[4];
    int w;
    if (n < 0x40) {
        b[0] = (uchar)n;
        w = 1;
    } else if (n < 0x4000) {
        b[0] = (uchar)(0x40 | (n & 0x3F));
        b[1] = (uchar)(n >> 6);
        w = 2;
    } else if (n < 0x400000) {
        b[0] = (uchar)(0x80 | (n & 0x3F));
        b[1] = (uchar)((n >> 6) & 0xFF);
        b[2] = (uchar)(n >> 14);
        w = 3;
    } else if (n < 0x40000000) {
        b[0] = (uchar)(0xC0 | (n & 0x3F));
        b[1] = (uchar)((n >> 6) & 0xFF);
        b[2] = (uchar)((n >> 14) & 0xFF);
        b[3] = (uchar)(n >> 22);
        w = 4;
    } else {
        return -1;
    }
    return put(o, b, w) || put(o, text, n);
}

static const char *utf8(PyObject *s, Py_ssize_t *n) {
    if (!PyUnicode_Check(s))
        return NULL;
    return PyUnicode_AsUTF8AndSize(s, n); /* NULL for lone surrogates: Python says why */
}

typedef struct {
    int n;
    const char *ptr[255];
    Py_ssize_t len[255];
} Prefixes;

/* A URI field against the prefix list: the longest matching prefix, the lowest index of equals
 * (codec._Prefixes.uri; a match by bytes is a match by characters in UTF-8). */
static int put_uri(Out *o, const Prefixes *pfx, PyObject *iri) {
    Py_ssize_t n;
    const char *text = utf8(iri, &n);
    if (text == NULL)
        return -1;
    int best = -1;
    for (int i = 0; i < pfx->n; i++)
        if (pfx->len[i] <= n && (best < 0 || pfx->len[i] > pfx->len[best]) &&
            memcmp(text, pfx->ptr[i], pfx->len[i]) == 0)
            best = i;
    Py_ssize_t skip = best < 0 ? 0 : pfx->len[best];
    return put_byte(o, best + 1) || put_uri_len(o, n - skip) || put(o, text + skip, n - skip);
}

/* (member type, bytes) of a non-Empty term, as codec._member; -1 to leave it to Python. */
static int put_member(Out *o, const Prefixes *pfx, PyObject *term, int *code) {
    if (PyUnicode_Check(term)) {
        PyObject *word = PyDict_GetItemWithError(K.reserved_code, term);
        if (word != NULL) {
            *code = 2;
            return put_byte(o, (int)PyLong_AsLong(word));
        }
        if (PyErr_Occurred())
            return -1;
        *code = 1;
        return put_uri(o, pfx, term);
    }
    if (PyObject_TypeCheck(term, K.Literal)) {
        *code = 4;
        PyObject *lex = PyTuple_GET_ITEM(term, 0), *datatype = PyTuple_GET_ITEM(term, 1);
        if (PyTuple_GET_ITEM(term, 2) == Py_None && PyUnicode_Check(datatype) &&
            PyUnicode_Compare(datatype, K.xsd_string) == 0) {
            Py_ssize_t n;
            const char *text = utf8(lex, &n);
            return text == NULL || put_byte(o, 0) || put_str(o, text, n);
        }
        PyObject *cached = PyDict_GetItemWithError(K.compact_cache, term);
        if (cached == NULL || !PyTuple_Check(cached) || PyTuple_GET_SIZE(cached) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(cached, 1)))
            return -1;
        PyObject *payload = PyTuple_GET_ITEM(cached, 1);
        return put_byte(o, (int)PyLong_AsLong(PyTuple_GET_ITEM(cached, 0))) ||
               put(o, PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload));
    }
    if (PyObject_TypeCheck(term, K.Var)) {
        *code = 3;
        long index = PyLong_AsLong(PyTuple_GET_ITEM(term, 0));
        if (index < 0 || index > 255)
            return -1;
        return put_byte(o, (int)index);
    }
    if (PyObject_TypeCheck(term, K.BNode)) {
        *code = 5;
        Py_ssize_t n;
        const char *label = utf8(PyTuple_GET_ITEM(term, 0), &n);
        return label == NULL || n == 0 || put_uri_len(o, n) || put(o, label, n);
    }
    return -1;
}

/* Whether member k of a triple repeats the previous triple's (then it is Empty), by ==. */
static int repeats(PyObject *prev, int k, PyObject *term) {
    return prev == NULL ? 0 : PyObject_RichCompareBool(PyTuple_GET_ITEM(prev, k), term, Py_EQ);
}

static const int SHIFT[3] = {0, 3, 5};
static const unsigned ALLOWED[3] = {0x2E, 0x0E, 0x3E}; /* member types allowed as S, P, O */

/* One Triple field, Empty where `prev` has the same member (codec._triple). */
static int put_triple(Out *o, const Prefixes *pfx, PyObject *t, PyObject *prev, int allow_vars) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3)
        return -1;
    Py_ssize_t at = o->len;
    int type_byte = 0;
    if (put_byte(o, 0))
        return -1;
    for (int k = 0; k < 3; k++) {
        PyObject *term = PyTuple_GET_ITEM(t, k);
        int same = repeats(prev, k, term);
        if (same < 0)
            return -1;
        if (same)
            continue;
        int code;
        if (put_member(o, pfx, term, &code) || !(ALLOWED[k] & (1u << code)) ||
            (code == 3 && !allow_vars))
            return -1;
        type_byte |= code << SHIFT[k];
    }
    o->p[at] = (uchar)type_byte;
    return 0;
}

/* A Graph field: count, then its triples (codec._put_graph). */
static int put_graph(Out *o, const Prefixes *pfx, PyObject *graph, int allow_vars) {
    if (!PyTuple_Check(graph) || PyTuple_GET_SIZE(graph) > 255 ||
        put_byte(o, (int)PyTuple_GET_SIZE(graph)))
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(graph); i++)
        if (put_triple(o, pfx, PyTuple_GET_ITEM(graph, i),
                       i ? PyTuple_GET_ITEM(graph, i - 1) : NULL, allow_vars))
            return -1;
    return 0;
}

/* compress.request_iris and compress._choose: the automatic prefix list, in C. */
typedef struct {
    int n;
    const char *ptr[64];
    Py_ssize_t len[64];
    int uses[64];
} Namespaces;

static int add_iri(Namespaces *ns, PyObject *term) {
    if (PyObject_TypeCheck(term, K.Literal)) {
        PyObject *datatype = PyTuple_GET_ITEM(term, 1);
        if (PyTuple_GET_ITEM(term, 2) != Py_None)
            return 0;
        int compact = PySet_Contains(K.compact_datatypes, datatype);
        if (compact < 0)
            return -1;
        if (compact)
            return 0;
        term = datatype; /* a TYPED literal: its datatype IRI is spelled out */
    }
    if (!PyUnicode_Check(term) || PyUnicode_GET_LENGTH(term) == 0)
        return 0;
    PyObject *word = PyDict_GetItemWithError(K.reserved_code, term);
    if (word != NULL || PyErr_Occurred())
        return word != NULL ? 0 : -1;
    Py_ssize_t n;
    const char *text = utf8(term, &n);
    if (text == NULL)
        return -1;
    Py_ssize_t cut = n - 1;
    while (cut > 0 && text[cut] != '#' && text[cut] != '/' && text[cut] != ':')
        cut--;
    if (cut <= 0)
        return 0;
    for (int i = 0; i < ns->n; i++)
        if (ns->len[i] == cut + 1 && memcmp(ns->ptr[i], text, cut + 1) == 0) {
            ns->uses[i]++;
            return 0;
        }
    if (ns->n == 64)
        return -1; /* many namespaces: Python chooses */
    ns->ptr[ns->n] = text;
    ns->len[ns->n] = cut + 1;
    ns->uses[ns->n++] = 1;
    return 0;
}

static int add_graph_iris(Namespaces *ns, PyObject *graph) {
    if (graph == Py_None)
        return 0;
    if (!PyTuple_Check(graph))
        return -1;
    PyObject *prev = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(graph); i++) {
        PyObject *t = PyTuple_GET_ITEM(graph, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3)
            return -1;
        for (int k = 0; k < 3; k++) {
            PyObject *term = PyTuple_GET_ITEM(t, k);
            int same = repeats(prev, k, term);
            if (same < 0)
                return -1;
            if (same)
                continue;
            if (add_iri(ns, term))
                return -1;
        }
        prev = t;
    }
    return 0;
}

/* The namespaces worth an entry: `uses × bytes > bytes + 2`, in order of first use. */
static void chosen(const Namespaces *ns, Prefixes *pfx) {
    pfx->n = 0;
    for (int i = 0; i < ns->n; i++)
        if (ns->uses[i] * ns->len[i] > ns->len[i] + 2) {
            pfx->ptr[pfx->n] = ns->ptr[i];
            pfx->len[pfx->n++] = ns->len[i];
        }
}

static int choose_prefixes(PyObject *req, Prefixes *pfx) {
    Namespaces ns;
    ns.n = 0;
    static const int graph_order[4] = {RQ_DELETE, RQ_INSERT, RQ_TEMPLATE, RQ_WHERE};
    for (int i = 0; i < 4; i++)
        if (add_graph_iris(&ns, PyTuple_GET_ITEM(req, graph_order[i])))
            return -1;
    PyObject *optional = PyTuple_GET_ITEM(req, RQ_OPTIONAL);
    if (optional != Py_None) {
        if (!PyTuple_Check(optional))
            return -1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(optional); i++)
            if (add_graph_iris(&ns, PyTuple_GET_ITEM(optional, i)))
                return -1;
    }
    PyObject *graphs = PyTuple_GET_ITEM(req, RQ_GRAPHS);
    if (graphs != Py_None) {
        if (!PyTuple_Check(graphs))
            return -1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(graphs); i++)
            if (add_iri(&ns, PyTuple_GET_ITEM(graphs, i)))
                return -1;
    }
    for (int i = RQ_SOURCE; i <= RQ_TARGET; i++)
        if (PyTuple_GET_ITEM(req, i) != Py_None && add_iri(&ns, PyTuple_GET_ITEM(req, i)))
            return -1;
    chosen(&ns, pfx);
    return 0;
}

/* The entries of a prefix list (§7.2): URI fields with prefix index 0. */
static int put_prefix_entries(Out *o, const Prefixes *pfx) {
    for (int i = 0; i < pfx->n; i++)
        if (put_byte(o, 0) || put_uri_len(o, pfx->len[i]) || put(o, pfx->ptr[i], pfx->len[i]))
            return -1;
    return 0;
}

/* A u16 field's value, or -1 if `obj` is not an int in 0..65535. */
static long u16_of(PyObject *obj) {
    long v = PyLong_Check(obj) ? PyLong_AsLong(obj) : -1;
    if (v == -1)
        PyErr_Clear();
    return v >= 0 && v <= 0xFFFF ? v : -1;
}

static int put_u16(Out *o, long v) {
    uchar b[2] = {(uchar)v, (uchar)(v >> 8)};
    return put(o, b, 2);
}

static int given_prefixes(PyObject *prefixes, Prefixes *pfx) {
    if (!PyTuple_Check(prefixes) || PyTuple_GET_SIZE(prefixes) > 255)
        return -1;
    pfx->n = (int)PyTuple_GET_SIZE(prefixes);
    for (int i = 0; i < pfx->n; i++) {
        pfx->ptr[i] = utf8(PyTuple_GET_ITEM(prefixes, i), &pfx->len[i]);
        if (pfx->ptr[i] == NULL || pfx->len[i] == 0 || pfx->len[i] >= 0x8000)
            return -1;
    }
    return 0;
}

static int put_header(Out *o, int tcp, PyObject *version, int type_byte, PyObject *tid_obj,
                      long seq) {
    long v = u16_of(version), tid = u16_of(tid_obj);
    if (v < 0 || v > 255 || tid < 0)
        return -1;
    uchar h[8] = {(uchar)v, (uchar)type_byte, (uchar)tid, (uchar)(tid >> 8), 0, 0, 0, 0};
    if (tcp)
        return put(o, h, 8); /* Length: filled in at the end */
    if (seq >= 0) {
        h[4] = (uchar)seq;
        h[5] = (uchar)(seq >> 8);
        return put(o, h, 6);
    }
    return put(o, h, 4);
}

static PyObject *finish(Out *o, int tcp, int ok) {
    PyObject *result = NULL;
    if (ok) {
        if (tcp) {
            uint32_t n = (uint32_t)o->len;
            uchar len[4] = {(uchar)n, (uchar)(n >> 8), (uchar)(n >> 16), (uchar)(n >> 24)};
            memcpy(o->p + 4, len, 4);
        }
        result = PyBytes_FromStringAndSize((const char *)o->p, o->len);
    }
    if (o->p != o->small)
        PyMem_Free(o->p);
    if (result == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return result;
}

static int encode_request(Out *o, PyObject *req, int tcp) {
    if (!PyObject_TypeCheck(req, K.Request) || PyTuple_GET_SIZE(req) != RQ_N)
        return -1;
    PyObject *tx_obj = PyTuple_GET_ITEM(req, RQ_TX);
    long tx = PyLong_Check(tx_obj) ? PyLong_AsLong(tx_obj) : -1;
    if (tx < 1 || tx > 127 || K.tx_by_code[tx] == NULL)
        return -1;
    PyObject *opts = PyTuple_GET_ITEM(req, RQ_OPTIONS);
    if (!PyObject_TypeCheck(opts, K.Options) || PyTuple_GET_SIZE(opts) != OP_N)
        return -1;
    for (int i = 1; i < OP_N; i++)
        if (PyTuple_GET_ITEM(opts, i) != Py_None)
            return -1; /* options other than PREFIX: Python */
    /* fields outside the layout must be unset */
    int in_layout[RQ_N] = {0};
    for (int i = 0; i < 4 && K.layout[tx][i] >= 0; i++)
        in_layout[(int)K.layout_slot[tx][i]] = 1;
    for (int i = RQ_DELETE; i <= RQ_TARGET; i++)
        if (!in_layout[i] && PyTuple_GET_ITEM(req, i) != Py_None)
            return -1;
    Prefixes pfx;
    PyObject *prefixes = PyTuple_GET_ITEM(opts, OP_PREFIX);
    int has_layout = K.layout[tx][0] >= 0;
    if (prefixes == Py_None) {
        pfx.n = 0;
        if (has_layout && choose_prefixes(req, &pfx))
            return -1;
    } else if (given_prefixes(prefixes, &pfx) || (pfx.n && !has_layout)) {
        return -1;
    }
    int confirmable = PyObject_IsTrue(PyTuple_GET_ITEM(req, RQ_CON));
    if (confirmable < 0 ||
        put_header(o, tcp, PyTuple_GET_ITEM(req, RQ_VERSION), (int)tx | (confirmable ? 0x80 : 0),
                   PyTuple_GET_ITEM(req, RQ_TID), -1))
        return -1;
    int allow_vars = K.allow_vars[tx];
    for (int i = 0; i < 4 && K.layout[tx][i] >= 0; i++) {
        PyObject *value = PyTuple_GET_ITEM(req, (int)K.layout_slot[tx][i]);
        switch (K.layout[tx][i]) {
        case FK_GRAPH: /* None: an empty graph, as `value or ()` */
            if (value == Py_None ? put_byte(o, 0) : put_graph(o, &pfx, value, allow_vars))
                return -1;
            break;
        case FK_PROJECTION: {
            long n = value == Py_None || !PyLong_Check(value) ? -1 : PyLong_AsLong(value);
            if (n < 0 || n > 255 || put_byte(o, (int)n))
                return -1;
            break;
        }
        case FK_OPTIONAL:
            if (value == Py_None) {
                if (put_byte(o, 0))
                    return -1;
                break;
            }
            if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) > 255 ||
                put_byte(o, (int)PyTuple_GET_SIZE(value)))
                return -1;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(value); j++)
                if (put_graph(o, &pfx, PyTuple_GET_ITEM(value, j), allow_vars))
                    return -1;
            break;
        case FK_NAMES:
            if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) < 1 ||
                PyTuple_GET_SIZE(value) > 255 || put_byte(o, (int)PyTuple_GET_SIZE(value)))
                return -1;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(value); j++) {
                PyObject *name = PyTuple_GET_ITEM(value, j);
                if (!PyUnicode_Check(name) || (tx == K.tx_create && PyUnicode_GET_LENGTH(name) == 0)
                    || put_uri(o, &pfx, name))
                    return -1;
            }
            break;
        default:
            if (!PyUnicode_Check(value) || put_uri(o, &pfx, value))
                return -1;
        }
    }
    if (put_byte(o, pfx.n ? 1 : 0))
        return -1;
    if (pfx.n) {
        if (put_byte(o, OP_PREFIX) || put_byte(o, pfx.n))
            return -1;
        if (put_prefix_entries(o, &pfx))
            return -1;
    }
    return 0;
}

/* The Data field of a SELECT or CONSTRUCT result with an automatic prefix list and no size
 * limit (codec._encode_result, codec._pack_result); ASK results and the rest: Python. */
static int put_result(Out *o, PyObject *result) {
    int select = PyObject_TypeCheck(result, K.SelectResult) && PyTuple_GET_SIZE(result) == 4;
    int construct = PyObject_TypeCheck(result, K.ConstructResult) && PyTuple_GET_SIZE(result) == 3;
    if (!select && !construct)
        return -1;
    PyObject *items = PyTuple_GET_ITEM(result, select ? 1 : 0);
    PyObject *total_obj = PyTuple_GET_ITEM(result, select ? 2 : 1);
    if (PyTuple_GET_ITEM(result, select ? 3 : 2) != Py_None || !PyTuple_Check(items) ||
        PyTuple_GET_SIZE(items) > 0xFFFF)
        return -1;
    Py_ssize_t count = PyTuple_GET_SIZE(items);
    long total = total_obj == Py_None ? (long)count
                                      : (PyLong_Check(total_obj) ? PyLong_AsLong(total_obj) : -1);
    if (total < count)
        return -1;
    long variables = 0;
    Namespaces ns;
    ns.n = 0;
    if (select) {
        PyObject *vc = PyTuple_GET_ITEM(result, 0);
        variables = PyLong_Check(vc) ? PyLong_AsLong(vc) : -1;
        if (variables < 0 || variables > 255)
            return -1;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *row = PyTuple_GET_ITEM(items, i);
            if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != variables)
                return -1;
            for (Py_ssize_t v = 0; v < variables; v++)
                if (PyTuple_GET_ITEM(row, v) != Py_None && add_iri(&ns, PyTuple_GET_ITEM(row, v)))
                    return -1;
        }
    } else if (add_graph_iris(&ns, items)) {
        return -1;
    }
    Prefixes pfx;
    chosen(&ns, &pfx);
    if (put_byte(o, pfx.n) || put_prefix_entries(o, &pfx))
        return -1;
    if (put_u16(o, total < 0xFFFF ? total : 0xFFFF) || put_u16(o, count))
        return -1;
    if (construct) {
        for (Py_ssize_t i = 0; i < count; i++)
            if (put_triple(o, &pfx, PyTuple_GET_ITEM(items, i),
                           i ? PyTuple_GET_ITEM(items, i - 1) : NULL, 0))
                return -1;
        return 0;
    }
    if (put_byte(o, (int)variables))
        return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *row = PyTuple_GET_ITEM(items, i);
        for (Py_ssize_t v = 0; v < variables; v++) {
            PyObject *term = PyTuple_GET_ITEM(row, v);
            if (term == Py_None) {
                if (put_byte(o, 0))
                    return -1;
                continue;
            }
            Py_ssize_t at = o->len;
            int code;
            if (put_byte(o, 0) || put_member(o, &pfx, term, &code) || code == 3)
                return -1;
            o->p[at] = (uchar)code;
        }
    }
    return 0;
}

/* A RES/IND (with a SELECT/CONSTRUCT result, or none) or an ACK (codec._encode_response,
 * codec._encode). */
static int encode_plain(Out *o, PyObject *msg, int tcp) {
    if (PyObject_TypeCheck(msg, K.Ack) && PyTuple_GET_SIZE(msg) == 3) {
        PyObject *seq = PyTuple_GET_ITEM(msg, 1);
        if (tcp || put_header(o, 0, PyTuple_GET_ITEM(msg, 2), 0, PyTuple_GET_ITEM(msg, 0), -1))
            return -1;
        if (seq == Py_None)
            return 0;
        long s = u16_of(seq);
        return s < 0 ? -1 : put_u16(o, s);
    }
    if (!PyObject_TypeCheck(msg, K.Response) || PyTuple_GET_SIZE(msg) != 6)
        return -1;
    PyObject *result = PyTuple_GET_ITEM(msg, 2);
    PyObject *status_obj = PyTuple_GET_ITEM(msg, 1);
    long status = PyLong_Check(status_obj) ? PyLong_AsLong(status_obj) : -1;
    int indication = PyObject_IsTrue(PyTuple_GET_ITEM(msg, 3));
    if (status < 0 || status > 0x7F || indication < 0 || (result != Py_None && status != 0))
        return -1;
    long seq = -1;
    if (indication && !tcp) {
        if ((seq = u16_of(PyTuple_GET_ITEM(msg, 4))) < 0)
            return -1;
    }
    if (put_header(o, tcp, PyTuple_GET_ITEM(msg, 5), (int)status | (indication ? 0x80 : 0),
                   PyTuple_GET_ITEM(msg, 0), seq))
        return -1;
    return result == Py_None ? 0 : put_result(o, result);
}

static PyObject *py_encode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !K.ready) {
        PyErr_SetString(PyExc_TypeError, "encode(msg, tcp) after setup()");
        return NULL;
    }
    int tcp = PyObject_IsTrue(args[1]);
    Out o;
    o.p = o.small;
    o.len = 0;
    o.cap = sizeof o.small;
    PyObject *msg = args[0];
    int rc = PyObject_TypeCheck(msg, K.Request) ? encode_request(&o, msg, tcp)
                                                : encode_plain(&o, msg, tcp);
    return finish(&o, tcp, rc == 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Module functions */

static int get_buffer(PyObject *obj, Py_buffer *view) {
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

static PyObject *py_decode_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !K.ready) {
        PyErr_SetString(PyExc_TypeError, "decode_request(buf, tcp) after setup()");
        return NULL;
    }
    Py_buffer view;
    if (get_buffer(args[0], &view))
        return NULL;
    PyObject *msg = decode_request(view.buf, view.len, PyObject_IsTrue(args[1]));
    PyBuffer_Release(&view);
    return msg;
}

static PyObject *py_decode_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !K.ready) {
        PyErr_SetString(PyExc_TypeError, "decode_response(buf, tcp, form) after setup()");
        return NULL;
    }
    long form = PyLong_AsLong(args[2]);
    if (form == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (get_buffer(args[0], &view))
        return NULL;
    PyObject *msg = decode_response(view.buf, view.len, PyObject_IsTrue(args[1]), (int)form);
    PyBuffer_Release(&view);
    return msg;
}

static PyObject *py_set_interning(PyObject *self, PyObject *on) {
    (void)self;
    int was = interning;
    interning = PyObject_IsTrue(on);
    return PyBool_FromLong(was);
}

static PyObject *py_clear_cache(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    for (unsigned i = 0; i < CACHE_SIZE; i++) {
        cache[i].len = -1;
        Py_CLEAR(cache[i].val);
    }
    Py_RETURN_NONE;
}

/* setup(config: dict): the types, tables and helpers, all prepared by codec.py. */
static PyObject *fetch(PyObject *config, const char *name) {
    PyObject *value = PyDict_GetItemString(config, name);
    if (value == NULL)
        PyErr_Format(PyExc_KeyError, "setup() needs %s", name);
    else
        Py_INCREF(value); /* kept for the life of the process */
    return value;
}

static int fetch_table(PyObject *config, const char *name, PyObject **table, int size) {
    PyObject *seq = fetch(config, name);
    if (seq == NULL)
        return -1;
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != size) {
        PyErr_Format(PyExc_ValueError, "%s must be a tuple of %d", name, size);
        return -1;
    }
    for (int i = 0; i < size; i++) {
        PyObject *item = PyTuple_GET_ITEM(seq, i);
        table[i] = item == Py_None ? NULL : Py_NewRef(item);
    }
    return 0;
}

static int fetch_ints(PyObject *config, const char *name, int *out, int size) {
    PyObject *seq = fetch(config, name);
    if (seq == NULL)
        return -1;
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != size) {
        PyErr_Format(PyExc_ValueError, "%s must be a tuple of %d", name, size);
        return -1;
    }
    for (int i = 0; i < size; i++) {
        out[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(seq, i));
        if (out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

#define TYPE(name) \
    if ((K.name = (PyTypeObject *)fetch(config, #name)) == NULL) return NULL; \
    if (!PyType_Check(K.name)) return PyErr_Format(PyExc_TypeError, #name " is not a type");
#define OBJ(field, name) if ((K.field = fetch(config, name)) == NULL) return NULL;

static PyObject *py_setup(PyObject *self, PyObject *config) {
    (void)self;
    if (!PyDict_Check(config))
        return PyErr_Format(PyExc_TypeError, "setup() takes a dict");
    TYPE(IRI) TYPE(Literal) TYPE(Var) TYPE(BNode) TYPE(Triple) TYPE(Request) TYPE(Response)
    TYPE(Ack) TYPE(Options) TYPE(SelectResult) TYPE(ConstructResult)
    OBJ(AskResult, "AskResult") OBJ(SolutionModifier, "SolutionModifier") OBJ(Bind, "Bind")
    OBJ(Credentials, "Credentials") OBJ(float_lexical, "float_lexical")
    OBJ(reserved_code, "reserved_code") OBJ(compact_cache, "compact_cache")
    OBJ(compact_datatypes, "compact_datatypes")
    OBJ(xsd_integer, "xsd_integer") OBJ(xsd_float, "xsd_float") OBJ(xsd_datetime, "xsd_datetime")
    OBJ(xsd_boolean, "xsd_boolean") OBJ(xsd_double, "xsd_double")
    OBJ(is_lang_tag, "is_lang_tag") OBJ(xsd_string, "xsd_string")
    OBJ(rdf_langstring, "rdf_langstring") OBJ(no_options, "no_options")
    K.empty_tuple = PyTuple_New(0);
    K.str_true = PyUnicode_InternFromString("true");
    K.str_false = PyUnicode_InternFromString("false");
    if (fetch_table(config, "tx_by_code", K.tx_by_code, 128) ||
        fetch_table(config, "status_by_code", K.status_by_code, 128) ||
        fetch_table(config, "op_by_code", K.op_by_code, 256) ||
        fetch_table(config, "order", K.order, 3) ||
        fetch_table(config, "vars", K.vars, 256) ||
        fetch_ints(config, "op_arity", K.op_arity, 256))
        return NULL;
    PyObject *reserved = fetch(config, "reserved");
    if (reserved == NULL || !PyTuple_Check(reserved) || PyTuple_GET_SIZE(reserved) > 256)
        return PyErr_Format(PyExc_ValueError, "reserved must be a tuple of at most 256");
    K.n_reserved = (int)PyTuple_GET_SIZE(reserved);
    for (int i = 0; i < K.n_reserved; i++)
        K.reserved[i] = Py_NewRef(PyTuple_GET_ITEM(reserved, i));
    int flat[128 * 4], slots[128 * 4], allowed[128], scalars[3];
    if (fetch_ints(config, "layout", flat, 128 * 4) ||
        fetch_ints(config, "layout_slot", slots, 128 * 4) ||
        fetch_ints(config, "allow_vars", K.allow_vars, 128) ||
        fetch_ints(config, "opts_allowed", allowed, 128) ||
        fetch_ints(config, "scalars", scalars, 3))
        return NULL;
    for (int i = 0; i < 128 * 4; i++) {
        K.layout[i / 4][i % 4] = (signed char)flat[i];
        K.layout_slot[i / 4][i % 4] = (signed char)slots[i];
    }
    for (int i = 0; i < 128; i++)
        K.opts_allowed[i] = (unsigned)allowed[i];
    K.op_bound = scalars[0];
    K.tx_create = scalars[1];
    K.version = scalars[2];
    K.ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", py_setup, METH_O, "Hand over the types and tables of ksp.codec (once)."},
    {"decode_request", (PyCFunction)(void (*)(void))py_decode_request, METH_FASTCALL,
     "decode_request(buf, tcp) -> Request | Ack | None (None: let the Python decoder answer)"},
    {"decode_response", (PyCFunction)(void (*)(void))py_decode_response, METH_FASTCALL,
     "decode_response(buf, tcp, form) -> Response | None; form = result's Tx code or -1"},
    {"encode", (PyCFunction)(void (*)(void))py_encode, METH_FASTCALL,
     "encode(msg, tcp) -> bytes | None (None: let the Python encoder answer)"},
    {"clear_cache", py_clear_cache, METH_NOARGS, "Forget the interned terms."},
    {"set_interning", py_set_interning, METH_O,
     "Turn term interning on or off (on by default); returns the previous setting."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ksp._speedups",
    "The decoder of ksp.codec in C, for valid messages (None: let the Python decoder answer).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    cache = PyMem_Calloc(CACHE_SIZE, sizeof(Slot));
    if (cache == NULL)
        return PyErr_NoMemory();
    for (unsigned i = 0; i < CACHE_SIZE; i++)
        cache[i].len = -1;
    return PyModule_Create(&module);
}
