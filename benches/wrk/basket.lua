-- wrk script for the basket example's stateful tools: every request is a valid MCP 2026-07-28
-- `tools/call` (the routing headers, `_meta` in params), every answer is classified, and one
-- machine-readable RESULT line is printed at the end, in the format of the shared harness's
-- call.lua plus the outcome counts.
--
-- Environment:
--   BENCH_TOOL     get | upgrade | note
--   BENCH_BASKETS  a file with one basket handle a line (the runner creates the baskets)
--   BENCH_RUN      a tag unique to this wrk run, so that every operation id is fresh
--   BENCH_TOKEN    if set and not empty: `Authorization: Bearer $BENCH_TOKEN` on every request
--
-- `upgrade` sends basket_upgrade_memory with the version it last saw for the basket and
-- memory_gib = 100 + that version. Only this script changes those baskets, so the memory at
-- version v is 100 + v - 1 and the request is always a real upgrade: the only correct answers are
-- `applied` and `stale_view`. The version is learned from every answer (an `applied` answer's
-- `version`, a `stale_view`'s `resumption.basis_version`, which is its `current_version`), so
-- after the first stale answer per basket (a new wrk run starts knowing none) most calls apply.
--
-- Two `applied` answers naming the same basket and version would be a lost update: they are
-- counted as `dup`.

local tool = os.getenv("BENCH_TOOL") or "get"
local run = os.getenv("BENCH_RUN") or tostring(os.time())
local names = { get = "basket_get", upgrade = "basket_upgrade_memory", note = "basket_add_note" }
local name = names[tool] or error("BENCH_TOOL must be get, upgrade or note, not " .. tool)

local handles = {}
local file = assert(io.open(os.getenv("BENCH_BASKETS") or "", "r"), "BENCH_BASKETS: no such file")
for line in file:lines() do
  if line ~= "" then table.insert(handles, line) end
end
file:close()
assert(#handles > 0, "BENCH_BASKETS lists no basket")

-- The `_meta` of the baseline's script, member for member: a difference in what the server
-- parses there would be measured as a difference between the tools.
local meta = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
  .. '"io.modelcontextprotocol/clientCapabilities":{}}'

local headers = {
  ["Content-Type"] = "application/json",
  ["Accept"] = "application/json, text/event-stream",
  ["MCP-Protocol-Version"] = "2026-07-28",
  ["Mcp-Method"] = "tools/call",
  ["Mcp-Name"] = name,
}
local token = os.getenv("BENCH_TOKEN")
if token and token ~= "" then headers["Authorization"] = "Bearer " .. token end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

-- What a request costs wrk is part of what a run measures, since wrk shares the machine's cores
-- with the server, and the baseline's script sends one request built once. So the request line
-- and headers are formatted once, and a `get`, whose body never changes, is built once a basket.
local function with_body(body)
  return head .. "Content-Length: " .. #body .. "\r\n\r\n" .. body
end

local function body_of(id, arguments)
  return '{"jsonrpc":"2.0","id":' .. id .. ',"method":"tools/call","params":{"name":"'
    .. name .. '","arguments":' .. arguments .. "," .. meta .. "}}"
end

-- A literal for a `string.format` template.
local function literal(text)
  return (string.gsub(text, "%%", "%%%%"))
end

-- A change's request differs from the last one to its basket only in the version it was based
-- on, the operation id and the JSON-RPC id. So each basket gets one template of the whole request
-- whose numbers have a fixed width (JSON allows the spaces before a number), its Content-Length
-- included, and a request is one `string.format` of three numbers.
local function template(handle)
  local op = literal(run) .. "-%020d"
  local arguments
  if tool == "upgrade" then
    arguments = '{"basket_id":"' .. literal(handle) .. '","expected_version":%10d,'
      .. '"memory_gib":%10d,"operation_id":"' .. op .. '"}'
  else
    local dots = string.rep(".", 40 - #("note " .. run .. "-") - 20)
    arguments = '{"basket_id":"' .. literal(handle) .. '","text":"note.' .. op .. dots
      .. '","operation_id":"' .. op .. '"}'
  end
  local body = body_of("%10d", arguments)
  local length = #string.format(body, 0, 0, 0, 0)
  return literal(head .. "Content-Length: " .. length .. "\r\n\r\n") .. body
end

function init(args)
  -- Without a body wrk.format ends with the blank line; the length goes before it.
  head = string.sub(wrk.format("POST", nil, headers), 1, -3)
  built, templates = nil, {}
  for i, handle in ipairs(handles) do
    if tool == "get" then
      built = built or {}
      built[i] = with_body(body_of(i, '{"basket_id":"' .. handle .. '"}'))
    else
      templates[i] = template(handle)
    end
  end
  sent = 0
  math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 1000003)
  versions = {}
  seen = {}
  applied, stale, current, rejected, other, rpcerror, non200, badbody, dup = 0, 0, 0, 0, 0, 0, 0, 0, 0
  codes = {}
  codestr = ""
end

function request()
  sent = sent + 1
  -- A random basket per call, as agents sharing baskets would pick them: calls on one basket
  -- overlap at random, and a share of the changes answers `stale_view`.
  local index = math.random(#handles)
  if built then
    return built[index]
  end
  if tool == "upgrade" then
    local v = versions[handles[index]] or 1
    return string.format(templates[index], sent, v, 100 + v, sent)
  end
  return string.format(templates[index], sent, sent, sent)
end

-- Every answer is checked, and what an answer costs wrk is part of what a run measures, as a
-- request's is: the baseline's script looks for one string in each answer. So a `get` answer
-- is checked the same way (the outcome `current`), and a change's answer is read with plain
-- searches and matches anchored where they landed; a pattern tried at every quote of the body
-- cost wrk more than the rest of a request. The rare answers go through `classify_other`.
function response(status, hdrs, body)
  if status ~= 200 then
    non200 = non200 + 1
    return
  end
  if tool == "get" then
    if string.find(body, '"outcome":"current"', 1, true) then
      current = current + 1
    else
      classify_other(body)
    end
    return
  end
  local at = string.find(body, '"outcome":"', 1, true)
  if not at then
    classify_other(body)
    return
  end
  -- Most answers are `applied`, whose outcome, handle and version come first, in that order.
  local outcome = "applied"
  local handle, version = string.match(body, '^applied","handle":"([^"]+)","version":(%d+)', at + 11)
  if handle then
    version = tonumber(version)
  else
    outcome = string.match(body, "^[%a_]+", at + 11)
    if outcome ~= "applied" and outcome ~= "stale_view" then
      classify_other(body)
      return
    end
    -- The first handle of either answer is its basket's (`structuredContent.handle`).
    at = string.find(body, '"handle":"', 1, true)
    if at then handle = string.match(body, '^[^"]+', at + 10) end
    at = string.find(body, '"basis_version":', 1, true)
    if at then version = tonumber(string.match(body, "^%d+", at + 16)) end
    if not handle or not version then
      badbody = badbody + 1
      return
    end
  end
  if version > (versions[handle] or 0) then
    versions[handle] = version
  end
  if outcome == "applied" then
    applied = applied + 1
    -- A basket's applied versions, keyed by number: no string is built per answer.
    local versions_seen = seen[handle]
    if not versions_seen then
      versions_seen = {}
      seen[handle] = versions_seen
    end
    if versions_seen[version] then dup = dup + 1 end
    versions_seen[version] = true
  else
    stale = stale + 1
  end
end

-- An answer that is neither a `get`'s `current` nor a change's `applied` or `stale_view`.
function classify_other(body)
  if string.find(body, '"error":{', 1, true) then
    rpcerror = rpcerror + 1
    return
  end
  local outcome = string.match(body, '"outcome":"([%a_]+)"')
  if outcome == "rejected" then
    rejected = rejected + 1
    -- Rare, so the summary string wrk copies out at the end is rebuilt each time.
    local code = string.match(body, '"code":"([%w_]+)"') or "?"
    codes[code] = (codes[code] or 0) + 1
    local parts = {}
    for k, v in pairs(codes) do table.insert(parts, k .. ":" .. v) end
    codestr = table.concat(parts, ",")
  elseif outcome then
    other = other + 1
  else
    badbody = badbody + 1
  end
end

function done(summary, latency, requests)
  local totals = {}
  local keys = { "applied", "stale", "current", "rejected", "other", "rpcerror", "non200",
    "badbody", "dup" }
  for _, k in ipairs(keys) do totals[k] = 0 end
  for _, t in ipairs(threads) do
    for _, k in ipairs(keys) do totals[k] = totals[k] + (t:get(k) or 0) end
  end
  local codelist = {}
  for _, t in ipairs(threads) do
    local c = t:get("codestr")
    if c and c ~= "" then table.insert(codelist, c) end
  end
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT rps=%.1f requests=%d secs=%.3f p50_us=%d p90_us=%d p99_us=%d max_us=%d "
      .. "applied=%d stale=%d current=%d rejected=%d other=%d rpcerror=%d non200=%d badbody=%d "
      .. "dup=%d err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d codes=%s\n",
    summary.requests / secs, summary.requests, secs,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    totals.applied, totals.stale, totals.current, totals.rejected, totals.other, totals.rpcerror,
    totals.non200, totals.badbody, totals.dup,
    e.connect, e.read, e.write, e.status, e.timeout,
    #codelist > 0 and table.concat(codelist, ",") or "-"))
end
