-- wrk script of the benchmark (bench/run.ts): POSTs the body in $BENCH_BODY_FILE with
-- $BENCH_AUTH as the Authorization header, and prints one machine-readable summary line.
local f = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
local auth = os.getenv("BENCH_AUTH")
if auth and auth ~= "" then wrk.headers["Authorization"] = auth end

-- The request's headers in one order, as a client sends them. wrk's own wrk.format walks the
-- headers table with pairs(), whose order changes from one wrk process to the next: every round
-- sent its headers in another order, and each new order is a new hidden class for the server's
-- `req.headers`, so the optimized functions that read a header were thrown away and compiled again
-- in the middle of a measured round (bench/README.md, fifteenth update). wrk still builds the
-- request once (no request() function: no Lua per request).
local ORDER = { "Host", "Content-Type", "Authorization" }
local ORDERED = { Host = true, ["Content-Type"] = true, Authorization = true }
function wrk.format(method, path, headers, body)
  method = method or wrk.method
  path = path or wrk.path
  headers = headers or wrk.headers
  body = body or wrk.body
  local lines, rest = { method .. " " .. path .. " HTTP/1.1" }, {}
  for _, name in ipairs(ORDER) do
    if headers[name] then lines[#lines + 1] = name .. ": " .. headers[name] end
  end
  for name in pairs(headers) do
    if not ORDERED[name] then rest[#rest + 1] = name end
  end
  table.sort(rest)
  for _, name in ipairs(rest) do lines[#lines + 1] = name .. ": " .. headers[name] end
  if body and not headers["Content-Length"] then lines[#lines + 1] = "Content-Length: " .. #body end
  return table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or "")
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"durationUs":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latencyUs":{"p50":%.1f,"p90":%.1f,"p99":%.1f,"max":%.1f,"mean":%.1f}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
