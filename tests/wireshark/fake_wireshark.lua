-- Runs tools/wireshark/ksp.lua outside Wireshark, on a plain Lua 5.4 (`lua5.4`), with just
-- enough of Wireshark's Lua API faked to drive it: the dissector's own code (every decoding
-- path) runs on that Lua version, not only its syntax. tests/test_wireshark.py feeds it the
-- golden vectors and compares what it records with what tshark (Lua 5.2) records.
--
--   lua5.4 fake_wireshark.lua ksp.lua INPUT
--
-- INPUT: one vector a line, "name<TAB>udp|tcp<TAB>kp_to_sib|sib_to_kp<TAB>context-hex<TAB>hex"
-- (context: the request a RES/IND answers, or "-"). Output: "name<TAB>field<TAB>value" lines.

local fields_out = {}
local current = "?"

local function record(field, value)
  local v = tostring(value):gsub("[\t\n]", " ")
  fields_out[#fields_out + 1] = current .. "\t" .. field .. "\t" .. v
end

-- -- buffers ---------------------------------------------------------------------------------

local Range = {}
Range.__index = Range
local Tvb = {}
Tvb.__index = Tvb

local function new_tvb(bytes)
  return setmetatable({bytes=bytes}, Tvb)
end
function Tvb:len() return #self.bytes end
Tvb.__call = function(self, pos, n)
  if n == nil then n = #self.bytes - pos end
  if pos < 0 or n < 0 or pos + n > #self.bytes then error("Range is out of bounds", 2) end
  return setmetatable({s=self.bytes:sub(pos + 1, pos + n), pos=pos, n=n}, Range)
end
function Range:len() return self.n end
function Range:raw() return self.s end
function Range:uint()
  local v = 0
  for i = 1, #self.s do v = v * 256 + self.s:byte(i) end
  return v
end
function Range:le_uint()
  local v = 0
  for i = #self.s, 1, -1 do v = v * 256 + self.s:byte(i) end
  return v
end
function Range:le_int()
  local v = self:le_uint()
  if v >= 2 ^ (8 * self.n - 1) then v = v - 2 ^ (8 * self.n) end
  return math.tointeger(v) or v
end
function Range:le_float()
  return (string.unpack(self.n == 4 and "<f" or "<d", self.s))
end
function Range:tvb() return new_tvb(self.s) end

-- -- tree ------------------------------------------------------------------------------------

local TreeItem = {}
TreeItem.__index = TreeItem
local function item() return setmetatable({}, TreeItem) end

local function value_of(field, range, le, value)
  if value ~= nil then
    if field.kind == "bool" then return value and "1" or "0" end
    if type(value) == "number" then return string.format("%d", value) end
    return value
  end
  if field.kind == "bytes" then return (range:raw():gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
  if field.kind == "uint" then return string.format("%d", le and range:le_uint() or range:uint()) end
  return range:raw()
end

local function add(self, le, field, range, value)
  if field.is_proto then return item() end
  record(field.abbr, value_of(field, range, le, value))
  return item()
end
function TreeItem:add(field, range, value) return add(self, false, field, range, value) end
function TreeItem:add_le(field, range, value) return add(self, true, field, range, value) end
function TreeItem:prepend_text() return self end
function TreeItem:append_text() return self end
function TreeItem:set_len() return self end
function TreeItem:set_text() return self end
function TreeItem:add_proto_expert_info(_, text) record("_ws.expert.message", text) return self end

-- -- the API ---------------------------------------------------------------------------------

base = {HEX=1, DEC=2}
expert = {group={MALFORMED=1}, severity={ERROR=1}}
ProtoExpert = {new=function(abbr) return {abbr=abbr} end}
Pref = {uint=function(_, default) return default end}
Struct = {pack=function(fmt, x) return string.pack(fmt, x) end}

local function pf(kind) return function(abbr) return {abbr=abbr, kind=kind} end end
ProtoField = {uint8=pf("uint"), uint16=pf("uint"), uint32=pf("uint"), string=pf("string"),
              bool=pf("bool"), bytes=pf("bytes"), none=pf("none")}

local registry = {}
function Proto(name)
  local p = {name=name, is_proto=true, prefs={}}
  function p:register_heuristic() end
  registry[name] = p
  return p
end
DissectorTable = {get=function() return {add=function() end} end}

function dissect_tcp_pdus(tvb, tree, fixed, get_len, dissect)
  local offset = 0
  while offset + fixed <= tvb:len() do
    local n = get_len(tvb, nil, offset)
    if offset + n > tvb:len() then return end
    dissect(tvb(offset, n):tvb(), CURRENT_PINFO, tree)
    offset = offset + n
  end
end

local Column = {}
Column.__index = Column
function Column:append(text) self.text = self.text .. text end
Column.__tostring = function(self) return self.text end
local function new_pinfo(src_port, dst_port, udp, sib_port)
  local cols = {}
  local columns = {info=setmetatable({text=""}, Column), protocol=setmetatable({text=""}, Column)}
  setmetatable(cols, {__index=columns, __newindex=function(_, k, v) columns[k].text = tostring(v) end})
  local function host(port) return port == sib_port and "10.0.0.1" or "10.0.0.2" end
  return {src=host(src_port), dst=host(dst_port), src_port=src_port, dst_port=dst_port,
          port_type=udp and 3 or 2, cols=cols}
end

-- -- run -------------------------------------------------------------------------------------

dofile(arg[1])
local ksp_udp, ksp_tcp = registry["ksp_udp_entry"], registry["ksp_tcp_entry"]

local function unhex(h)
  return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end))
end

local n = 0
for line in io.lines(arg[2]) do
  local name, transport, direction, context, hex = line:match("^(.-)\t(.-)\t(.-)\t(.-)\t(.-)$")
  n = n + 1
  local kp_port, sib_port = 20000 + n, transport == "tcp" and 7001 or 7000
  local entry = transport == "tcp" and ksp_tcp or ksp_udp
  if context ~= "-" then
    current = "-"
    CURRENT_PINFO = new_pinfo(kp_port, sib_port, transport ~= "tcp", sib_port)
    entry.dissector(new_tvb(unhex(context)), CURRENT_PINFO, item())
  end
  current = name
  local src, dst = kp_port, sib_port
  if direction == "sib_to_kp" then src, dst = sib_port, kp_port end
  CURRENT_PINFO = new_pinfo(src, dst, transport ~= "tcp", sib_port)
  local ok, err = pcall(entry.dissector, new_tvb(unhex(hex)), CURRENT_PINFO, item())
  if not ok then record("_ws.expert.message", "Lua Error: " .. tostring(err)) end
end
for _, l in ipairs(fields_out) do
  if l:sub(1, 2) ~= "-\t" then print(l) end
end
