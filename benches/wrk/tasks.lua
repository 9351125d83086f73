-- wrk script for what the Tasks extension costs on the basket example: every request is a valid
-- MCP 2026-07-28 request (routing headers, `_meta` in params), every answer is checked, and one
-- machine-readable RESULT line is printed at the end, in the format of the shared harness's
-- call.lua plus the counts of correct and incorrect answers.
--
-- Environment:
--   BENCH_CASE     quote-sync | quote-task | task-get
--   BENCH_BASKETS  a file with one basket handle a line (quote-sync, quote-task)
--   BENCH_TASKS    a file with one completed task id a line (task-get)
--
-- quote-sync   basket_quote with `seconds: 0` from a client that does not take tasks: the tool
--              runs inside the request. Correct answer: a result with `price_eur`.
-- quote-task   basket_quote with `seconds: 0.001` from a client that declares the extension: the
--              tool waits, so the call becomes a task (record committed, worker started).
--              Correct answer: `resultType: "task"` with a task id, or, when the millisecond
--              had already passed by the time the server first polled the tool, the plain
--              result (counted as `inline`, not as a task). A 429 (a running-task cap) is
--              counted as `limited`.
-- task-get     tasks/get of completed tasks in turn. Correct answer: `status: "completed"`.

local case = os.getenv("BENCH_CASE") or "quote-sync"
assert(case == "quote-sync" or case == "quote-task" or case == "task-get",
  "BENCH_CASE must be quote-sync, quote-task or task-get, not " .. case)

local function lines(var)
  local list = {}
  local file = assert(io.open(os.getenv(var) or "", "r"), var .. ": no such file")
  for line in file:lines() do
    if line ~= "" then table.insert(list, line) end
  end
  file:close()
  assert(#list > 0, var .. " lists nothing")
  return list
end

local ids = lines(case == "task-get" and "BENCH_TASKS" or "BENCH_BASKETS")

local capabilities = case == "quote-sync" and "{}"
  or '{"extensions":{"io.modelcontextprotocol/tasks":{}}}'
local meta = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
  .. '"io.modelcontextprotocol/clientCapabilities":' .. capabilities .. ','
  .. '"io.modelcontextprotocol/clientInfo":{"name":"wrk-tasks","version":"1"}}'
local method = case == "task-get" and "tasks/get" or "tools/call"
local seconds = case == "quote-task" and "0.001" or "0"
local expected = ({
  ["quote-sync"] = '"price_eur":',
  ["quote-task"] = '"resultType":"task"',
  ["task-get"] = '"status":"completed"',
})[case]

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  sent = 0
  ok, inline, limited, rpcerror, non200, badbody = 0, 0, 0, 0, 0, 0
end

function request()
  sent = sent + 1
  local id = ids[(sent - 1) % #ids + 1]
  local name, params
  if case == "task-get" then
    name = id
    params = '{"taskId":"' .. id .. '",' .. meta .. '}'
  else
    name = "basket_quote"
    params = '{"name":"basket_quote","arguments":{"basket_id":"' .. id .. '","seconds":'
      .. seconds .. '},' .. meta .. '}'
  end
  local headers = {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["MCP-Protocol-Version"] = "2026-07-28",
    ["Mcp-Method"] = method,
    ["Mcp-Name"] = name,
  }
  local body = '{"jsonrpc":"2.0","id":' .. sent .. ',"method":"' .. method .. '","params":'
    .. params .. '}'
  return wrk.format("POST", nil, headers, body)
end

function response(status, hdrs, body)
  if status == 429 then
    limited = limited + 1
  elseif status ~= 200 then
    non200 = non200 + 1
  elseif string.find(body, '"error":{', 1, true) then
    rpcerror = rpcerror + 1
  elseif string.find(body, '"isError":true', 1, true) then
    badbody = badbody + 1
  elseif string.find(body, expected, 1, true) then
    ok = ok + 1
  elseif case == "quote-task" and string.find(body, '"price_eur":', 1, true) then
    inline = inline + 1
  else
    badbody = badbody + 1
  end
end

function done(summary, latency, requests)
  local keys = { "ok", "inline", "limited", "rpcerror", "non200", "badbody" }
  local totals = {}
  for _, k in ipairs(keys) do totals[k] = 0 end
  for _, t in ipairs(threads) do
    for _, k in ipairs(keys) do totals[k] = totals[k] + (t:get(k) or 0) end
  end
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT rps=%.1f requests=%d secs=%.3f p50_us=%d p90_us=%d p99_us=%d max_us=%d "
      .. "ok=%d inline=%d limited=%d rpcerror=%d non200=%d badbody=%d "
      .. "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests / secs, summary.requests, secs,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    totals.ok, totals.inline, totals.limited, totals.rpcerror, totals.non200, totals.badbody,
    e.connect, e.read, e.write, e.status, e.timeout))
end
