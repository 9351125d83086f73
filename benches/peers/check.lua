-- wrk script of the peer benchmark (run.sh): sends one MCP 2026-07-28 request again and again
-- with the headers the Streamable HTTP transport requires, and prints one machine-readable
-- RESULT line when done.
--
-- Environment (set by run.sh):
--   PEERS_BODY_FILE    file holding the JSON-RPC request body
--   PEERS_METHOD       the Mcp-Method header (tools/call, tools/list)
--   PEERS_NAME         the Mcp-Name header (the tool's name), empty for none
--   PEERS_TOKEN        a bearer token to send, empty for none
--   PEERS_CLOSE        "1": a new connection per request (the request says Connection: close;
--                      the server closes after answering and wrk connects again)
--   PEERS_VERIFY_EACH  "1": check every response in Lua (costs wrk about 10 % of its rate at
--                      the floor's speed, so it is off by default: run.sh checks each server's
--                      answer in full once before timing it, and wrk itself counts every
--                      non-2xx status and socket error, which fail the run)
--   PEERS_EXPECT       with PEERS_VERIFY_EACH: text every response body must contain (plain
--                      search), "|"-separated for several
--
-- With PEERS_VERIFY_EACH, a response counts as bad unless its status is 200, its body contains
-- every PEERS_EXPECT text and neither a JSON-RPC error object nor "isError":true, and it carries
-- no Mcp-Session-Id header (a stateless server hands out none).

local function env(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  return v
end

local body_file = assert(env("PEERS_BODY_FILE", nil), "PEERS_BODY_FILE is not set")
local f = assert(io.open(body_file, "rb"))
wrk.body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = env("PEERS_METHOD", "tools/call")
local name = env("PEERS_NAME", nil)
if name then wrk.headers["Mcp-Name"] = name end
local token = env("PEERS_TOKEN", nil)
if token then wrk.headers["Authorization"] = "Bearer " .. token end
if env("PEERS_CLOSE", "0") == "1" then wrk.headers["Connection"] = "close" end

local expect = {}
for part in string.gmatch(env("PEERS_EXPECT", ""), "[^|]+") do
  table.insert(expect, part)
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  bad = 0
  firstbad = ""
end

if env("PEERS_VERIFY_EACH", "0") == "1" then
  function response(status, headers, body)
    local why = nil
    if status ~= 200 then
      why = "HTTP " .. status
    elseif string.find(body, '"error":{', 1, true) or string.find(body, '"isError":true', 1, true) then
      why = "an error"
    else
      for i = 1, #expect do
        if not string.find(body, expect[i], 1, true) then why = "missing " .. expect[i]; break end
      end
    end
    if not why and (headers["Mcp-Session-Id"] or headers["mcp-session-id"]) then
      why = "Mcp-Session-Id header"
    end
    if why then
      bad = bad + 1
      if firstbad == "" then firstbad = why .. ": " .. string.sub(body or "", 1, 200) end
    end
  end
end

function done(summary, latency, requests)
  local nbad, first = 0, ""
  for _, t in ipairs(threads) do
    nbad = nbad + (t:get("bad") or 0)
    if first == "" then first = t:get("firstbad") or "" end
  end
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT rps=%.1f requests=%d secs=%.3f p50_us=%d p99_us=%d bad=%d "
      .. "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests / secs, summary.requests, secs, latency:percentile(50),
    latency:percentile(99), nbad, e.connect, e.read, e.write, e.status, e.timeout))
  if first ~= "" then io.write("FIRSTBAD " .. first .. "\n") end
end
