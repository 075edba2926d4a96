-- Wireshark dissector for the Knowledge Sharing Protocol (KSP), as docs/wire-format.md of
-- ksp-gateway specifies it: every field of the header, the data fields, the options, the RPN
-- expressions and the results, over UDP, over TCP (frames reassembled across segments) and
-- inside CoAP payloads (Content-Format 65000), sealed envelopes (section 13) included.
--
--   tshark -X lua_script:tools/wireshark/ksp.lua -r capture.pcapng -V
--   (Wireshark: copy it to ~/.local/lib/wireshark/plugins/)
--
-- Ports: UDP 7000, TCP 7001 (the SIB's defaults; Decode As for others), plus a heuristic on
-- any UDP/TCP port (first byte 0x01 or 0xA1 and a plausible type byte). The direction (REQ/ACK
-- from a KP, RES/IND from the SIB) is the side on a SIB port, else the side that spoke first.
-- A malformed field gets expert info naming the status a SIB would answer (0x04 data field,
-- 0x05 option type, 0x06 option format, ...). Each term also appears in `ksp.term` as text
-- (<iri>, "lexical"^^<datatype>, "text"@lang, _:label, ?vN, UNDEF), the form the tests compare
-- with the golden vectors. Written for Lua 5.2 and 5.4: no integer division, no bit operators.

local ksp = Proto("ksp", "Knowledge Sharing Protocol")

local TX = {[0x01]="DELETE_DATA", [0x02]="INSERT_DATA", [0x03]="UPDATE_DATA", [0x04]="DELETE",
  [0x05]="INSERT", [0x06]="UPDATE", [0x07]="SELECT", [0x08]="ASK", [0x09]="CONSTRUCT",
  [0x0a]="DELETE_PERSISTENT", [0x0b]="INSERT_PERSISTENT", [0x0c]="UPDATE_PERSISTENT",
  [0x0d]="SELECT_PERSISTENT", [0x0e]="ASK_PERSISTENT", [0x0f]="CONSTRUCT_PERSISTENT",
  [0x10]="TERMINATE", [0x11]="RESET", [0x12]="CREATE", [0x13]="DROP", [0x14]="COPY",
  [0x15]="MOVE", [0x16]="ADD"}
local STATUS = {[0]="OK", "VERSION_NOT_SUPPORTED", "INVALID_TRANSACTION_TYPE",
  "INVALID_MESSAGE_TYPE", "INVALID_DATA_FORMAT", "INVALID_OPTION_TYPE", "INVALID_OPTION_FORMAT",
  "INTERNAL_ERROR", "ACCESS_DENIED", "TERMINATED", "LIMIT_EXCEEDED", "UNKNOWN_TRANSACTION",
  "RESPONSE_TOO_LARGE", "NO_SUCH_GRAPH", "GRAPH_EXISTS", "ECHO_REQUIRED", "NUMBER_BEHIND"}
local OPT = {[0]="PREFIX", "DELETE_GRAPH", "INSERT_GRAPH", "QUERY_GRAPH", "OPTIONAL_PATTERN",
  "FILTER", "SOLUTION_MODIFIER", "BIND", "MAX_RESPONSE_SIZE", "CREDENTIALS",
  "ECHO", "EPOCH"}
local OP = {[7]="EQ", [8]="NE", [9]="LT", [10]="GT", [11]="LE", [12]="GE", [13]="ADD", [14]="SUB",
  [15]="MUL", [16]="DIV", [17]="OR", [18]="AND", [19]="REGEX", [20]="NOT", [21]="NEG",
  [22]="REGEX_FLAGS", [23]="BOUND", [25]="STR", [26]="LANG", [27]="DATATYPE", [28]="IRI",
  [29]="IS_IRI", [30]="IS_BLANK", [31]="IS_LITERAL", [32]="IS_NUMERIC", [33]="STRLEN",
  [34]="UCASE", [35]="LCASE", [36]="ABS", [37]="ROUND", [38]="CEIL", [39]="FLOOR", [40]="YEAR",
  [41]="MONTH", [42]="DAY", [43]="HOURS", [44]="MINUTES", [45]="SECONDS", [46]="TIMEZONE",
  [47]="TZ", [48]="ENCODE_FOR_URI", [49]="MD5", [50]="SHA1", [51]="SHA256", [52]="SHA384",
  [53]="SHA512", [54]="BNODE_OF", [56]="LANGMATCHES", [57]="STRSTARTS", [58]="STRENDS",
  [59]="CONTAINS", [60]="STRBEFORE", [61]="STRAFTER", [62]="STRLANG", [63]="STRDT",
  [64]="SAME_TERM", [65]="SUBSTR", [66]="SUBSTR_LEN", [67]="REPLACE", [68]="IF",
  [69]="REPLACE_FLAGS", [70]="NOW", [71]="RAND", [72]="UUID", [73]="STRUUID", [74]="BNODE",
  [75]="CONCAT", [76]="COALESCE", [77]="IN", [78]="NOT_IN"}
-- operands popped; a variadic operator (VARIADIC) pops these plus its u8 count n
local ARITY = {[20]=1, [21]=1, [22]=3, [23]=1, [25]=1, [26]=1, [27]=1, [28]=1, [29]=1, [30]=1,
  [31]=1, [32]=1, [33]=1, [34]=1, [35]=1, [36]=1, [37]=1, [38]=1, [39]=1, [40]=1, [41]=1, [42]=1,
  [43]=1, [44]=1, [45]=1, [46]=1, [47]=1, [48]=1, [49]=1, [50]=1, [51]=1, [52]=1, [53]=1, [54]=1,
  [66]=3, [67]=3, [68]=3, [69]=4, [70]=0, [71]=0, [72]=0, [73]=0, [74]=0, [75]=0, [76]=0, [77]=1,
  [78]=1}
local VARIADIC = {[75]=true, [76]=true, [77]=true, [78]=true}
local ORDER = {[0]="NONE", "ASC", "DESC"}
local XSD = "http://www.w3.org/2001/XMLSchema#"
local RESERVED = {[0]="http://www.w3.org/1999/02/22-rdf-syntax-ns#type",
  "http://www.w3.org/2000/01/rdf-schema#Class", "http://www.w3.org/2000/01/rdf-schema#subClassOf",
  "http://www.w3.org/1999/02/22-rdf-syntax-ns#Property",
  "http://www.w3.org/2000/01/rdf-schema#subPropertyOf", "http://www.w3.org/2000/01/rdf-schema#range",
  "http://www.w3.org/2000/01/rdf-schema#domain", "http://www.w3.org/2002/07/owl#TransitiveProperty",
  "http://www.w3.org/2002/07/owl#sameAs", XSD .. "string", XSD .. "integer", XSD .. "float",
  XSD .. "dateTime", XSD .. "boolean"}
local LANG_STRING = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"
-- data fields per transaction: G graph, P projection (VC), O optional graphs, N graph names,
-- I one graph name
local FIELDS = {[1]={"G:delete"}, [2]={"G:insert"}, [3]={"G:delete", "G:insert"},
  [4]={"G:delete", "G:where"}, [5]={"G:insert", "G:where"},
  [6]={"G:delete", "G:insert", "G:where"}, [7]={"P:projection", "G:where", "O:optional"},
  [8]={"G:where", "O:optional"}, [9]={"G:template", "G:where", "O:optional"},
  [16]={}, [17]={}, [18]={"N:graphs"}, [19]={"N:graphs"}, [20]={"I:source", "I:target"},
  [21]={"I:source", "I:target"}, [22]={"I:source", "I:target"}}
for code = 10, 15 do FIELDS[code] = FIELDS[code - 6] end
local function base_tx(code) if code >= 10 and code <= 15 then return code - 6 end return code end
local QUERIES = {[7]=true, [8]=true, [9]=true}
local PATTERN_UPDATES = {[4]=true, [5]=true, [6]=true}
local function applies(opt, tx)
  local b = base_tx(tx)
  if opt == 0 then return tx ~= 16 and tx ~= 17 end
  if opt == 1 then return b == 1 or b == 3 or b == 4 or b == 6 end
  if opt == 2 then return b == 2 or b == 3 or b == 5 or b == 6 end
  if opt == 3 or opt == 5 or opt == 7 then return QUERIES[b] or PATTERN_UPDATES[b] or false end
  if opt == 4 then return PATTERN_UPDATES[b] or false end
  if opt == 6 then return b == 7 or b == 9 end
  if opt == 11 then return tx ~= 16 end  -- EPOCH: TERMINATE has no number (15)
  return opt >= 8 and opt <= 10
end

local f = {
  version = ProtoField.uint8("ksp.version", "Version"),
  type_byte = ProtoField.uint8("ksp.type_byte", "Type/status byte", base.HEX),
  msg = ProtoField.string("ksp.msg", "Message type"),
  tx = ProtoField.uint8("ksp.tx", "Transaction type", base.HEX, TX),
  status = ProtoField.uint8("ksp.status", "Status", base.HEX, STATUS),
  con = ProtoField.bool("ksp.con", "Confirmable (CON)"),
  tid = ProtoField.uint16("ksp.tid", "Transaction ID"),
  seq = ProtoField.uint16("ksp.seq", "Sequence number"),
  length = ProtoField.uint32("ksp.length", "Length"),
  answers = ProtoField.uint8("ksp.answers", "Answers", base.HEX, TX),
  field = ProtoField.string("ksp.field", "Data field"),
  count = ProtoField.uint8("ksp.count", "Count"),
  triple = ProtoField.string("ksp.triple", "Triple"),
  types = ProtoField.uint8("ksp.member_types", "Member types (OT|PT|ST)", base.HEX),
  term = ProtoField.string("ksp.term", "Term"),
  prefix_index = ProtoField.uint8("ksp.prefix_index", "Prefix index"),
  uri_length = ProtoField.uint16("ksp.uri_length", "URI length"),
  str_length = ProtoField.uint32("ksp.string_length", "String length"),
  literal_type = ProtoField.uint8("ksp.literal_type", "Literal type"),
  vc = ProtoField.uint8("ksp.vc", "Variable count"),
  graph_name = ProtoField.string("ksp.graph_name", "Graph name"),
  oc = ProtoField.uint8("ksp.option_count", "Option count"),
  option = ProtoField.uint8("ksp.option", "Option", base.HEX, OPT),
  prefix = ProtoField.string("ksp.prefix", "Prefix"),
  token = ProtoField.string("ksp.token", "RPN token"),
  expression = ProtoField.string("ksp.expression", "Expression"),
  bind_var = ProtoField.uint8("ksp.bind_var", "BIND variable"),
  order = ProtoField.uint8("ksp.order", "Order", base.DEC, ORDER),
  order_var = ProtoField.uint8("ksp.order_var", "Order variable"),
  limit = ProtoField.uint16("ksp.limit", "Limit"),
  offset = ProtoField.uint16("ksp.offset", "Offset"),
  distinct = ProtoField.bool("ksp.distinct", "Distinct"),
  max_size = ProtoField.uint32("ksp.max_response_size", "Max response size"),
  kp_id = ProtoField.bytes("ksp.kp_id", "KP ID"),
  password = ProtoField.string("ksp.password", "Password"),
  echo = ProtoField.bytes("ksp.echo", "Echo value"),
  epoch = ProtoField.uint32("ksp.epoch", "Epoch"),
  next_epoch = ProtoField.uint32("ksp.next_epoch", "Next epoch"),
  trc = ProtoField.uint16("ksp.trc", "Total result count"),
  rc = ProtoField.uint16("ksp.rc", "Result count"),
  row = ProtoField.string("ksp.row", "Row"),
  ask = ProtoField.bool("ksp.ask", "ASK result"),
  ack_seq = ProtoField.uint16("ksp.ack_seq", "Acknowledged sequence number"),
  sealed_kp = ProtoField.bytes("ksp.sealed.kp_id", "Sealed: KP ID"),
  sealed_ctr = ProtoField.uint32("ksp.sealed.counter", "Sealed: counter"),
  sealed_tag = ProtoField.bytes("ksp.sealed.tag", "Sealed: tag"),
}
local plist = {}
for _, v in pairs(f) do plist[#plist + 1] = v end
ksp.fields = plist

local ef = {
  malformed = ProtoExpert.new("ksp.malformed", "Malformed KSP message", expert.group.MALFORMED,
                              expert.severity.ERROR),
}
ksp.experts = {ef.malformed}

local prefs = ksp.prefs
prefs.udp_port = Pref.uint("UDP port", 7000, "the SIB's UDP port")
prefs.tcp_port = Pref.uint("TCP port", 7001, "the SIB's TCP port")

-- -- reading ----------------------------------------------------------------------------------

local Fault = {}
local function fail(status, why) error(setmetatable({status=status, why=why}, Fault), 0) end

local R = {}
R.__index = R
local function reader(tvb, pos, stop, status)
  return setmetatable({tvb=tvb, pos=pos, stop=stop, status=status, prefixes={}, prev=nil}, R)
end
function R:need(n, what)
  if self.pos + n > self.stop then fail(self.status, "truncated " .. what) end
end
function R:range(n) self:need(n, "field"); return self.tvb(self.pos, n) end
function R:u8(what) self:need(1, what); local v = self.tvb(self.pos, 1):uint(); self.pos = self.pos + 1; return v end
function R:u16(what) self:need(2, what); local v = self.tvb(self.pos, 2):le_uint(); self.pos = self.pos + 2; return v end
function R:u32(what) self:need(4, what); local v = self.tvb(self.pos, 4):le_uint(); self.pos = self.pos + 4; return v end
function R:bytes(n, what)
  self:need(n, what)
  local s = self.tvb(self.pos, n):raw()
  self.pos = self.pos + n
  return s
end

local function valid_utf8(s)
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    local extra
    if c < 0x80 then extra = 0
    elseif c >= 0xC2 and c <= 0xDF then extra = 1
    elseif c >= 0xE0 and c <= 0xEF then extra = 2
    elseif c >= 0xF0 and c <= 0xF4 then extra = 3
    else return false end
    if i + extra > n then return false end
    for k = 1, extra do
      local d = s:byte(i + k)
      if d < 0x80 or d > 0xBF then return false end
    end
    if extra == 2 then
      local d = s:byte(i + 1)
      if (c == 0xE0 and d < 0xA0) or (c == 0xED and d > 0x9F) then return false end
    elseif extra == 3 then
      local d = s:byte(i + 1)
      if (c == 0xF0 and d < 0x90) or (c == 0xF4 and d > 0x8F) then return false end
    end
    i = i + extra + 1
  end
  return true
end

function R:utf8(n, what)
  local s = self:bytes(n, what)
  if not valid_utf8(s) then fail(self.status, "invalid UTF-8 in " .. what) end
  return s
end

function R:uri_length()
  local b0 = self:u8("URI length")
  if b0 < 128 then return b0 end
  local b1 = self:u8("URI length")
  local n = (b0 - 128) + b1 * 128
  if n < 128 then fail(self.status, "URI length not minimal") end
  return n
end

function R:string_length()
  local b0 = self:u8("string length")
  local width = math.floor(b0 / 64)
  local n, scale = b0 % 64, 64
  for _ = 1, width do
    n = n + self:u8("string length") * scale
    scale = scale * 256
  end
  local lows = {[0]=0, 64, 16384, 4194304}
  if width > 0 and n < lows[width] then fail(self.status, "string length not minimal") end
  return n
end

-- a URI field: the full IRI
function R:uri(what, no_prefix)
  local start = self.pos
  local k = self:u8(what .. " prefix index")
  local n = self:uri_length()
  local s = self:utf8(n, what)
  if k > 0 then
    if no_prefix then fail(self.status, "a prefix entry with a prefix index") end
    local p = self.prefixes[k]
    if p == nil then fail(self.prefix_status or self.status, "prefix index " .. k .. " beyond the list") end
    s = p .. s
  end
  return s, start
end

-- floats as Python's repr writes them (wire format 4.3)
local function repr_digits(v, digits_max, same)
  local s
  for n = 1, digits_max do
    s = string.format("%." .. (n - 1) .. "e", v)
    if same(tonumber(s)) then return s end
    if n <= 15 then  -- the nearest n digits can miss next to a power of two: try neighbours
      local mant, exp = s:match("^(-?[%d.]+)e([-+]%d+)$")
      local digits = mant:gsub("[-.]", "")
      local m = tonumber(digits)
      for _, d in ipairs({-1, 1}) do
        local c = string.format("%d", m + d)
        if #c == #digits and m + d > 0 then
          local cand = (v < 0 and "-" or "") .. c:sub(1, 1) .. (n > 1 and ("." .. c:sub(2)) or "")
                       .. "e" .. exp
          if same(tonumber(cand)) then return cand end
        end
      end
    end
  end
  return s
end

local function repr_float(v, raw, double)
  if v ~= v then return "NaN" end
  if v == math.huge then return "INF" end
  if v == -math.huge then return "-INF" end
  if v == 0 then
    local sign = raw:byte(double and 8 or 4) >= 128
    return sign and "-0.0" or "0.0"
  end
  local same
  if double then
    same = function(x) return x == v end
  else
    same = function(x) return Struct.pack("<f", x) == raw end
  end
  local s = repr_digits(v, double and 17 or 9, same)
  local sign, mant, exp = s:match("^(-?)([%d.]+)e([-+]%d+)$")
  local digits = mant:gsub("%.", ""):gsub("0+$", "")
  if digits == "" then digits = "0" end
  local e = tonumber(exp)
  if e >= -4 and e < 16 then  -- positional (Python: 0.d × 10^k with -4 < k <= 16)
    local out
    if e >= 0 then
      if #digits <= e + 1 then
        out = digits .. string.rep("0", e + 1 - #digits) .. ".0"
      else
        out = digits:sub(1, e + 1) .. "." .. digits:sub(e + 2)
      end
    else
      out = "0." .. string.rep("0", -e - 1) .. digits
    end
    return sign .. out
  end
  local m = digits:sub(1, 1) .. (#digits > 1 and ("." .. digits:sub(2)) or "")
  local es = e < 0 and "-" or "+"
  return sign .. m .. "e" .. es .. string.format("%02d", math.abs(e))
end

local function lit_text(lex, dt, lang)
  local q = '"' .. lex:gsub("\\", "\\\\"):gsub('"', '\\"') .. '"'
  if lang then return q .. "@" .. lang end
  return q .. "^^<" .. dt .. ">"
end

local function check_datetime(s, r)
  local y, mo, d, h, mi, se = s:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)$")
  if not y or tonumber(mo) < 1 or tonumber(mo) > 12 or tonumber(d) < 1 or tonumber(d) > 31
     or tonumber(h) > 23 or tonumber(mi) > 59 or tonumber(se) > 59 then
    fail(r.status, "bad xsd:dateTime " .. s)
  end
end

-- a literal field (after its type byte): text
function R:literal(kind)
  if kind == 0 then
    return lit_text(self:utf8(self:string_length(), "string"), XSD .. "string")
  elseif kind == 1 then
    self:need(4, "integer")
    local v = self.tvb(self.pos, 4):le_int()
    self.pos = self.pos + 4
    return lit_text(string.format("%d", v), XSD .. "integer")
  elseif kind == 2 or kind == 7 then
    local n = kind == 2 and 4 or 8
    self:need(n, "float")
    local raw = self.tvb(self.pos, n):raw()
    local v = self.tvb(self.pos, n):le_float()
    self.pos = self.pos + n
    return lit_text(repr_float(v, raw, kind == 7), XSD .. (kind == 2 and "float" or "double"))
  elseif kind == 3 then
    local s = self:bytes(19, "dateTime")
    check_datetime(s, self)
    return lit_text(s, XSD .. "dateTime")
  elseif kind == 4 then
    local b = self:u8("boolean")
    if b > 1 then fail(self.status, "boolean " .. b) end
    return lit_text(b == 1 and "true" or "false", XSD .. "boolean")
  elseif kind == 5 then
    local n = self:u8("language tag length")
    if n == 0 then fail(self.status, "empty language tag") end
    local tag = self:bytes(n, "language tag")
    if not tag:match("^[%w%-]+$") then fail(self.status, "bad language tag") end
    return lit_text(self:utf8(self:string_length(), "string"), nil, tag)
  elseif kind == 6 then
    local dt = self:uri("datatype")
    if dt == "" or dt == LANG_STRING then fail(self.status, "datatype " .. dt .. " in a 0x06 literal") end
    return lit_text(self:utf8(self:string_length(), "lexical form"), dt)
  end
  fail(self.status, "literal type " .. kind)
end

-- one member (type already read): its text
function R:member(kind, where)
  if kind == 1 then return "<" .. self:uri(where) .. ">" end
  if kind == 2 then
    local code = self:u8("reserved word")
    if RESERVED[code] == nil then fail(self.status, string.format("reserved word 0x%02x", code)) end
    return "<" .. RESERVED[code] .. ">"
  end
  if kind == 3 then return "?v" .. self:u8("variable") end
  if kind == 4 then return self:literal(self:u8("literal type")) end
  if kind == 5 then
    local n = self:uri_length()
    if n == 0 then fail(self.status, "empty blank node label") end
    return "_:" .. self:utf8(n, "blank node label")
  end
  fail(self.status, "member type " .. kind)
end

-- -- tree ----------------------------------------------------------------------------------------

local function add_term(tree, r, start, text, label)
  tree:add(f.term, r.tvb(start, r.pos - start), text):prepend_text(label .. ": ")
end

-- a graph field (5.0); `vars`: variables allowed; returns nothing, fills the tree
local function graph(r, tree, name, vars, count_status)
  local start = r.pos
  local tc = r:u8(name .. " triple count")
  local sub = tree:add(f.field, r.tvb(start, 1), name)
  sub:add(f.count, r.tvb(start, 1), tc)
  local prev = nil
  for i = 1, tc do
    local tstart = r.pos
    local b = r:u8("member types")
    local kinds = {b % 8, math.floor(b / 8) % 4, math.floor(b / 32)}
    local t = sub:add(f.triple, r.tvb(tstart, 1), "")
    t:add(f.types, r.tvb(tstart, 1), b)
    local texts = {}
    for k, pos in ipairs({"s", "p", "o"}) do
      local kind = kinds[k]
      local mstart = r.pos
      local text
      if kind == 0 then
        if prev == nil then fail(r.status, "Empty in the first triple of a graph") end
        text = prev[k]
        t:add(f.term, r.tvb(mstart, 0), text):prepend_text(pos .. " (same as before): ")
      else
        if kind == 3 and not vars then fail(r.status, "a variable in a DATA graph or a result") end
        if kind == 4 and k == 1 then fail(r.status, "a literal subject") end
        text = r:member(kind, pos)
        add_term(t, r, mstart, text, pos)
      end
      texts[k] = text
    end
    t:set_len(r.pos - tstart)
    t:set_text("Triple " .. i .. ": " .. table.concat(texts, " "))
    prev = texts
  end
  sub:set_len(r.pos - start)
end

local function graph_name(r, tree, label, allow_default)
  local start = r.pos
  local name = r:uri(label)
  if name == "" and not allow_default then fail(r.status, "the default graph in CREATE") end
  tree:add(f.graph_name, r.tvb(start, r.pos - start), name == "" and "DEFAULT" or name)
      :prepend_text(label .. ": ")
end

local function expression(r, tree, label)
  local start = r.pos
  local n = r:u8("token count")
  if n == 0 then fail(r.status, "an expression with no token") end
  local sub = tree:add(f.expression, r.tvb(start, 1), label)
  local depth, texts, last_var = 0, {}, false
  for _ = 1, n do
    local tstart = r.pos
    local code = r:u8("token")
    local text
    if code <= 4 then text = r:literal(code); depth = depth + 1
    elseif code == 5 then text = "?v" .. r:u8("variable"); depth = depth + 1
    elseif code == 6 then text = "<" .. r:uri("URI operand") .. ">"; depth = depth + 1
    elseif code == 24 then text = r:literal(r:u8("literal type")); depth = depth + 1
    elseif OP[code] then
      if code == 23 and not last_var then fail(r.status, "bound() not after a variable") end
      local arity = ARITY[code] or 2
      text = OP[code]
      if VARIADIC[code] then
        local count = r:u8("count")
        arity = arity + count
        text = text .. "(" .. count .. ")"
      end
      if depth < arity then fail(r.status, "RPN stack underflow") end
      depth = depth - arity + 1
    else
      fail(r.status, string.format("token type 0x%02x", code))
    end
    last_var = code == 5
    sub:add(f.token, r.tvb(tstart, r.pos - tstart), text)
    texts[#texts + 1] = text
  end
  if depth ~= 1 then fail(r.status, "RPN leaves " .. depth .. " values") end
  sub:set_len(r.pos - start)
  sub:set_text(label .. ": " .. table.concat(texts, " "))
end

-- An echo value (7.7): u8 length 1 … 10, then the bytes, opaque. The ECHO option's form and a
-- RES ECHO REQUIRED's Data field; a fault is the reader's status (0x06 / 0x04).
local ECHO_MAX = 10
local function echo_value(r, tree)
  local n = r:u8("echo length")
  if n == 0 or n > ECHO_MAX then fail(r.status, "echo length " .. n .. " (1 … " .. ECHO_MAX .. ")") end
  tree:add(f.echo, r:range(n))
  r.pos = r.pos + n
end

local function option_body(r, tree, code, tx)
  if code == 0 then
    local n = r:u8("prefix count")
    if n == 0 then fail(r.status, "PREFIX with count 0") end
    r.collected = {}
    for i = 1, n do
      local start = r.pos
      local p = r:uri("prefix", true)
      if p == "" then fail(r.status, "an empty prefix entry") end
      r.collected[i] = p
      tree:add(f.prefix, r.tvb(start, r.pos - start), p)
    end
  elseif code >= 1 and code <= 3 then
    local n = r:u8("graph count")
    if n == 0 then fail(r.status, "a graph option with count 0") end
    for _ = 1, n do graph_name(r, tree, OPT[code], true) end
  elseif code == 4 then
    local n = r:u8("optional graph count")
    if n == 0 then fail(r.status, "OPTIONAL PATTERN with count 0") end
    for i = 1, n do graph(r, tree, "optional " .. i, true) end
  elseif code == 5 then
    local n = r:u8("filter count")
    if n == 0 then fail(r.status, "FILTER with count 0") end
    for i = 1, n do expression(r, tree, "filter " .. i) end
  elseif code == 6 then
    local start = r.pos
    local flags = r:u8("modifier flags")
    if flags >= 32 then fail(r.status, "reserved modifier bits set") end
    local order = flags % 4
    if order == 3 then fail(r.status, "order 3") end
    tree:add(f.order, r.tvb(start, 1), order)
    tree:add(f.distinct, r.tvb(start, 1), math.floor(flags / 16) % 2 == 1)
    if order ~= 0 then tree:add(f.order_var, r:range(1), r:u8("order variable")) end
    if math.floor(flags / 4) % 2 == 1 then tree:add(f.limit, r:range(2), r:u16("limit")) end
    if math.floor(flags / 8) % 2 == 1 then tree:add(f.offset, r:range(2), r:u16("offset")) end
  elseif code == 7 then
    local n = r:u8("bind count")
    if n == 0 then fail(r.status, "BIND with count 0") end
    for i = 1, n do
      tree:add(f.bind_var, r:range(1), r:u8("bind variable"))
      expression(r, tree, "bind " .. i)
    end
  elseif code == 8 then
    tree:add_le(f.max_size, r:range(4), r:u32("max response size"))
  elseif code == 9 then
    r:need(16, "KP ID")
    tree:add(f.kp_id, r:range(16))
    r.pos = r.pos + 16
    local n = r:u8("password length")
    local start = r.pos
    local pw = r:utf8(n, "password")
    tree:add(f.password, r.tvb(start, n), pw)
  elseif code == 10 then
    echo_value(r, tree)
  elseif code == 11 then
    local epoch = r:u32("epoch")
    if epoch == 0 then fail(r.status, "EPOCH 0 (epoch 0 is no option)") end
    tree:add_le(f.epoch, r.tvb(r.pos - 4, 4), epoch)
  end
end

-- A tree stand-in for the first pass: accepts every call, shows nothing.
local function stub_tree()
  local stub = {}
  return setmetatable(stub, {__index=function() return function() return stub end end})
end

-- A REQ: data fields, then options. The prefix list is the PREFIX option, which follows the
-- data that uses it, so a first pass reads everything with any prefix index accepted (faults
-- that need no prefix list, in wire order: data 0x04, then options 0x05/0x06), and a second
-- pass reads it again with the list, reporting a prefix index beyond it or a datatype that
-- reaches rdf:langString through a prefix (0x04 in the data, then 0x06 in an option): the
-- order of wire format 3.2, whatever the options' order.
local function request(tvb, pos, stop, tree, tx)
  local fields = FIELDS[tx]
  local function data_fields(r, t)
    for _, spec in ipairs(fields) do
      local kind, name = spec:sub(1, 1), spec:sub(3)
      local b = base_tx(tx)
      if kind == "G" then
        graph(r, t, name, not (b >= 1 and b <= 3))
      elseif kind == "P" then
        t:add(f.vc, r:range(1), r:u8("variable count"))
      elseif kind == "O" then
        local start = r.pos
        local n = r:u8("optional graph count")
        t:add(f.count, r.tvb(start, 1), n):prepend_text("optional graphs: ")
        for i = 1, n do graph(r, t, "optional " .. i, true) end
      elseif kind == "N" then
        local n = r:u8("graph count")
        if n == 0 then fail(r.status, "GC = 0") end
        t:add(f.count, r.tvb(r.pos - 1, 1), n):prepend_text("graph names: ")
        for _ = 1, n do graph_name(r, t, name, tx ~= 18) end
      elseif kind == "I" then
        graph_name(r, t, name, true)
      end
    end
  end
  local function options(r, t)
    r.status = 6
    local oc = r:u8("option count")
    t:add(f.oc, r.tvb(r.pos - 1, 1), oc)
    local seen = {}
    for _ = 1, oc do
      local start = r.pos
      local code = r:u8("option type")
      if code > 11 then fail(5, string.format("option type 0x%02x", code)) end
      if not applies(code, tx) then fail(5, OPT[code] .. " does not apply to " .. TX[tx]) end
      if seen[code] then fail(6, "repeated option " .. OPT[code]) end
      seen[code] = true
      local o = t:add(f.option, r.tvb(start, 1), code)
      option_body(r, o, code, tx)
      o:set_len(r.pos - start)
    end
    if r.pos ~= r.stop then fail(6, "bytes after the last option") end
  end
  -- first pass: any prefix index stands for a prefix no IRI check can mistake for a real one
  -- (never empty, never making rdf:langString), so the checks that need the list all wait
  -- for the second pass (3.2, rule 1), wherever PREFIX is among the options
  local any = setmetatable({}, {__index=function() return "\0" end})
  local first = reader(tvb, pos, stop, 4)
  first.prefixes = any
  data_fields(first, stub_tree())
  local opts = reader(tvb, first.pos, stop, 6)
  opts.prefixes = any
  options(opts, stub_tree())
  local r = reader(tvb, pos, stop, 4)
  r.prefixes = opts.collected or {}
  r.prefix_status = 4
  data_fields(r, tree)
  r.prefix_status = 6
  options(r, tree)
end

local function result(tvb, pos, stop, tree, answers)
  local r = reader(tvb, pos, stop, 4)
  local b = base_tx(answers)
  if b == 8 then
    local v = r:u8("ASK result")
    if v > 1 then fail(4, "ASK result " .. v) end
    tree:add(f.ask, r.tvb(pos, 1), v == 1)
  else
    local pc = r:u8("prefix count")
    tree:add(f.count, r.tvb(pos, 1), pc):prepend_text("prefixes: ")
    for i = 1, pc do
      local start = r.pos
      local p = r:uri("prefix", true)
      if p == "" then fail(4, "an empty prefix entry") end
      r.prefixes[i] = p
      tree:add(f.prefix, r.tvb(start, r.pos - start), p)
    end
    local trc_at = r.pos
    local trc, rc = r:u16("TRC"), r:u16("RC")
    tree:add_le(f.trc, r.tvb(trc_at, 2), trc)
    tree:add_le(f.rc, r.tvb(trc_at + 2, 2), rc)
    if rc > trc then fail(4, "RC above TRC") end
    if b == 7 then
      local vc = r:u8("VC")
      tree:add(f.vc, r.tvb(r.pos - 1, 1), vc)
      for i = 1, rc do
        local rstart = r.pos
        local row = tree:add(f.row, r.tvb(rstart, 0), "")
        local texts = {}
        for k = 1, vc do
          local mstart = r.pos
          local kind = r:u8("result term type")
          local text
          if kind == 0 then text = "UNDEF"
          elseif kind == 3 then fail(4, "a variable in a result row")
          else text = r:member(kind, "result") end
          add_term(row, r, mstart, text, "?v" .. (k - 1))
          texts[k] = text
        end
        row:set_len(r.pos - rstart)
        row:set_text("Row " .. i .. ": " .. table.concat(texts, " "))
      end
    else
      -- CONSTRUCT: RC triples, Empty = the same member as the previous triple of the message
      local save = r.pos
      local prev = nil
      local sub = tree:add(f.field, r.tvb(save, 0), "triples")
      for i = 1, rc do
        local tstart = r.pos
        local bt = r:u8("member types")
        local kinds = {bt % 8, math.floor(bt / 8) % 4, math.floor(bt / 32)}
        local t = sub:add(f.triple, r.tvb(tstart, 1), "")
        local texts = {}
        for k, posn in ipairs({"s", "p", "o"}) do
          local kind = kinds[k]
          local mstart = r.pos
          if kind == 0 then
            if prev == nil then fail(4, "Empty in the first result triple") end
            texts[k] = prev[k]
            t:add(f.term, r.tvb(mstart, 0), texts[k]):prepend_text(posn .. " (same as before): ")
          else
            if kind == 3 then fail(4, "a variable in a CONSTRUCT result") end
            if kind == 4 and k == 1 then fail(4, "a literal subject") end
            texts[k] = r:member(kind, posn)
            add_term(t, r, mstart, texts[k], posn)
          end
        end
        t:set_len(r.pos - tstart)
        t:set_text("Triple " .. i .. ": " .. table.concat(texts, " "))
        prev = texts
      end
      sub:set_len(r.pos - save)
    end
  end
  if r.pos ~= stop then fail(4, "bytes after the result") end
end

-- -- messages -----------------------------------------------------------------------------------

local kp_side = {}    -- "addr:port" -> true: a KP endpoint (spoke first, or talks to a SIB port)
local tx_of = {}      -- "kp endpoint|tid|res" or "|ind" -> transaction type of the request

local function endpoint(addr, port) return tostring(addr) .. ":" .. tostring(port) end

local function from_kp(pinfo, transport)
  local sib_port = transport == "tcp" and prefs.tcp_port or prefs.udp_port
  if pinfo.dst_port == sib_port and pinfo.src_port ~= sib_port then return true end
  if pinfo.src_port == sib_port and pinfo.dst_port ~= sib_port then return false end
  local src, dst = endpoint(pinfo.src, pinfo.src_port), endpoint(pinfo.dst, pinfo.dst_port)
  if kp_side[src] then return true end
  if kp_side[dst] then return false end
  kp_side[src] = true  -- the first to speak is the KP
  return true
end

local function status_name(code) return STATUS[code] or string.format("status 0x%02x", code) end

-- one whole message in tvb(offset, length): returns nothing; errors become expert info
local function message(tvb, pinfo, tree, transport, kp_to_sib, offset, length)
  local root = tree:add(ksp, tvb(offset, length))
  local stop = offset + length
  local head_status = 4
  local ok, err = pcall(function()
    local r = reader(tvb, offset, stop, 4)
    local first = length > 0 and tvb(offset, 1):uint()  -- an empty datagram: the header's fault
    if first == 0xA1 and transport ~= "tcp" then  -- a sealed envelope (wire format 13)
      if length < 29 then fail(4, "a sealed envelope shorter than 29 bytes") end
      root:add(f.sealed_kp, tvb(offset + 1, 16))
      root:add_le(f.sealed_ctr, tvb(offset + 17, 4))
      root:add(f.sealed_tag, tvb(stop - 8, 8))
      root:append_text(" (sealed)")
      offset, stop = offset + 21, stop - 8
      r = reader(tvb, offset, stop, 4)
    end
    local hsize = transport == "tcp" and 8 or 4
    r:need(hsize, "header")
    local version = tvb(offset, 1):uint()
    root:add(f.version, tvb(offset, 1))
    local tb = tvb(offset + 1, 1):uint()
    root:add(f.type_byte, tvb(offset + 1, 1))
    local code, flag = tb % 128, tb >= 128
    local tid = tvb(offset + 2, 2):le_uint()
    root:add_le(f.tid, tvb(offset + 2, 2))
    if transport == "tcp" then
      root:add_le(f.length, tvb(offset + 4, 4))
      if tvb(offset + 4, 4):le_uint() ~= length then fail(4, "Length does not match the frame") end
    end
    if version ~= 1 then fail(1, "version " .. version) end
    local kp = kp_to_sib and endpoint(pinfo.src, pinfo.src_port) or endpoint(pinfo.dst, pinfo.dst_port)
    local info
    if kp_to_sib then
      if code == 0 and not flag then
        root:add(f.msg, tvb(offset + 1, 1), "ACK")
        if transport == "tcp" then fail(3, "an ACK over TCP") end
        local n = stop - offset - 4
        if n == 2 then
          root:add_le(f.ack_seq, tvb(offset + 4, 2))
          info = string.format("ACK tid=%d seq=%d", tid, tvb(offset + 4, 2):le_uint())
        elseif n == 0 then
          info = string.format("ACK tid=%d", tid)
        else
          fail(4, "ACK data of " .. n .. " bytes")
        end
      else
        root:add(f.msg, tvb(offset + 1, 1), "REQ")
        if code == 0 then fail(3, "type byte 0x80 from a KP") end
        if TX[code] == nil then fail(2, string.format("transaction type 0x%02x", code)) end
        root:add(f.tx, tvb(offset + 1, 1), code)
        root:add(f.con, tvb(offset + 1, 1), flag)
        info = string.format("REQ %s %s tid=%d", TX[code], flag and "CON" or "NON", tid)
        tx_of[kp .. "|" .. tid .. "|res"] = code
        if code >= 10 and code <= 15 then tx_of[kp .. "|" .. tid .. "|ind"] = code end
        request(tvb, offset + hsize, stop, root, code)
      end
    else
      local ind = flag
      local named = code >= 64  -- bit 6: the RES names its request's epoch (15.6)
      code = code % 64
      local pos = offset + hsize
      if ind and transport ~= "tcp" then
        r:need(6, "IND header")
        root:add_le(f.seq, tvb(offset + 4, 2))
        pos = offset + 6
      end
      root:add(f.msg, tvb(offset + 1, 1), ind and "IND" or "RES")
      root:add(f.status, tvb(offset + 1, 1), code)
      local answers = tx_of[kp .. "|" .. tid .. (ind and "|ind" or "|res")]
      if answers then root:add(f.answers, tvb(offset + 2, 2), answers) end
      info = string.format("%s %s tid=%d", ind and "IND" or "RES", status_name(code), tid)
      if ind and transport ~= "tcp" then info = info .. " seq=" .. tvb(offset + 4, 2):le_uint() end
      if named then
        -- a u32 of at least 1 after a UDP RES header; never on an IND, over TCP, on NUMBER BEHIND
        if ind or transport == "tcp" then
          fail(4, "type byte bit 6 on " .. (ind and "an IND" or "a RES over TCP"))
        end
        if code == 16 then fail(4, "NUMBER BEHIND with bit 6: its Data field names the epoch") end
        r:need(8, "RES epoch")
        local epoch = tvb(offset + 4, 4):le_uint()
        root:add_le(f.epoch, tvb(offset + 4, 4))
        if epoch == 0 then fail(4, "RES epoch 0 (epoch 0 is written as no field)") end
        pos = offset + 8
        info = info .. " epoch=" .. epoch
      end
      if answers then info = info .. " (" .. TX[answers] .. ")" end
      if ind and (code == 15 or code == 16) then
        fail(4, "status " .. code .. " is a RES's only (3.2), not an IND's")
      elseif code == 15 then
        local r = reader(tvb, pos, stop, 4)
        echo_value(r, root)
        if r.pos ~= stop then fail(4, "data after the echo value") end
      elseif code == 16 then
        -- NUMBER BEHIND (15): u32 the request's epoch, u32 the first epoch taken as new
        if stop - pos ~= 8 then fail(4, "NUMBER BEHIND with " .. (stop - pos) .. " bytes of Data, not 8") end
        root:add_le(f.epoch, tvb(pos, 4))
        root:add_le(f.next_epoch, tvb(pos + 4, 4))
        info = info .. string.format(" epoch=%d next=%d", tvb(pos, 4):le_uint(), tvb(pos + 4, 4):le_uint())
      elseif code ~= 0 then
        if pos ~= stop then fail(4, "data after a non-OK status") end
      elseif answers and (base_tx(answers) == 7 or base_tx(answers) == 8 or base_tx(answers) == 9) then
        result(tvb, pos, stop, root, answers)
      elseif answers and pos ~= stop then
        fail(4, "data in the answer to " .. TX[answers])
      end
    end
    pinfo.cols.info:append((tostring(pinfo.cols.info) ~= "" and "; " or "") .. info)
  end)
  if not ok then
    if getmetatable(err) == Fault then
      root:add_proto_expert_info(ef.malformed, string.format(
        "status 0x%02x %s: %s", err.status, status_name(err.status), err.why))
      pinfo.cols.info:append(string.format(" [malformed: status 0x%02x %s]", err.status,
                                           status_name(err.status)))
    else
      error(err)
    end
  end
end

-- -- transports ---------------------------------------------------------------------------------

local function dissect_udp(tvb, pinfo, tree)
  pinfo.cols.protocol = "KSP"
  pinfo.cols.info = ""
  message(tvb, pinfo, tree, "udp", from_kp(pinfo, "udp"), 0, tvb:len())
  return tvb:len()
end

local function tcp_len(tvb, pinfo, offset)
  local n = tvb(offset + 4, 4):le_uint()
  if n < 8 then  -- a framing error: the stream cannot be followed past it (2.2)
    return tvb:len() - offset
  end
  return n
end

local function tcp_pdu(tvb, pinfo, tree)
  pinfo.cols.protocol = "KSP"
  message(tvb, pinfo, tree, "tcp", from_kp(pinfo, "tcp"), 0, tvb:len())
  return tvb:len()
end

local function dissect_tcp(tvb, pinfo, tree)
  pinfo.cols.info = ""
  dissect_tcp_pdus(tvb, tree, 8, tcp_len, tcp_pdu)
  return tvb:len()
end

function ksp.dissector(tvb, pinfo, tree)
  if pinfo.port_type == 3 then  -- PT_UDP
    return dissect_udp(tvb, pinfo, tree)
  end
  return dissect_tcp(tvb, pinfo, tree)
end

local ksp_udp = Proto("ksp_udp_entry", "KSP over UDP")
local ksp_tcp = Proto("ksp_tcp_entry", "KSP over TCP")
ksp_udp.dissector = dissect_udp
ksp_tcp.dissector = dissect_tcp

local function plausible(tvb, tcp)
  if tvb:len() < 4 then return false end
  local first = tvb(0, 1):uint()
  if first == 0xA1 and not tcp then return tvb:len() >= 29 end
  if first ~= 0x01 then return false end
  local code = tvb(1, 1):uint() % 128
  if code >= 64 and not tcp and tvb:len() >= 8 then code = code - 64 end  -- RES epoch (15.6)
  if code > 0x16 then return false end
  if tcp then
    if tvb:len() < 8 then return false end
    local n = tvb(4, 4):le_uint()
    return n >= 8 and n <= 16777216
  end
  return true
end

local function heur_udp(tvb, pinfo, tree)
  if not plausible(tvb, false) then return false end
  dissect_udp(tvb, pinfo, tree)
  return true
end

local function heur_tcp(tvb, pinfo, tree)
  if not plausible(tvb, true) then return false end
  pinfo.conversation = ksp_tcp
  dissect_tcp(tvb, pinfo, tree)
  return true
end

local function register()
  DissectorTable.get("udp.port"):add(prefs.udp_port, ksp_udp)
  DissectorTable.get("tcp.port"):add(prefs.tcp_port, ksp_tcp)
end
register()
ksp_udp:register_heuristic("udp", heur_udp)
ksp_tcp:register_heuristic("tcp", heur_tcp)

-- KSP inside CoAP payloads (Content-Format 65000, docs/coap-binding.md). Wireshark's CoAP
-- dissector hands a payload to the media_type table by its content format's name; 65000 is
-- from the experimental range, which it names "Unknown Type 65000".
local ksp_coap = Proto("ksp_coap_entry", "KSP in CoAP")
function ksp_coap.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "CoAP/KSP"
  message(tvb, pinfo, tree, "udp", from_kp(pinfo, "coap"), 0, tvb:len())
  return tvb:len()
end
local media = DissectorTable.get("media_type")
for _, name in ipairs({"application/x-ksp", "Unknown Type 65000"}) do media:add(name, ksp_coap) end
