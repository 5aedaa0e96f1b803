-- Shared by every scenario: one machine-readable result line.
--
-- The contract's answers that are not failures are counted apart by the
-- scenarios that provoke them, in each thread, summed over `threads`:
-- `in_flight`, 409s for duplicates whose first delivery is still running
-- (stripe.lua), and `queue_full`, 503s for new events past a full queue's
-- bound (bounded.lua).
function done(summary, latency, requests)
  local seconds = summary.duration / 1e6
  local conflicts, full = 0, 0
  for _, thread in ipairs(threads or {}) do
    conflicts = conflicts + (thread:get("in_flight") or 0)
    full = full + (thread:get("queue_full") or 0)
  end
  local failed = summary.errors.status + summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.timeout - conflicts - full
  io.write(string.format("RESULT rps=%.0f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f requests=%d failed=%d in_flight_409=%d queue_full_503=%d\n",
    summary.requests / seconds, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000, summary.requests, failed, conflicts, full))
end

-- The headers of a request built in request(): the command line's -H
-- headers (wrk.headers; e.g. "Connection: close" for the new-connection
-- scenarios, which wrk.format with a table of its own would drop) plus
-- the scenario's own.
function headers(own)
  local all = {}
  for name, value in pairs(wrk.headers) do all[name] = value end
  for name, value in pairs(own) do all[name] = value end
  return all
end
