-- Every request is a duplicate of one completed event: the replay path.
-- The body is BENCH_BODY's file when set (the scenario primes the event
-- with the same bytes), else a small JSON object.
dofile("bench/wrk/report.lua")
wrk.method = "POST"
wrk.headers["X-Id"] = "bench-replay"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"id":"bench-replay","type":"bench"}'
local file = os.getenv("BENCH_BODY")
if file and file ~= "" then
  local f = assert(io.open(file, "rb"))
  wrk.body = f:read("*a")
  f:close()
end
