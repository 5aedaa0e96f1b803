-- Stripe-signed deliveries from a file (`load sign`), a share of them retries
-- of earlier events. Thread i sends lines i, i+T, i+2T, ... and wraps around.
dofile("bench/wrk/report.lua")
threads = {}
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
function init(args)
  deliveries = {}
  for line in io.lines(os.getenv("BENCH_DELIVERIES")) do
    local signature, body = line:match("([^\t]+)\t(.*)")
    table.insert(deliveries, { signature, body })
  end
  stride = tonumber(os.getenv("BENCH_THREADS"))
  index = tid + 1
  in_flight = 0
end
-- A retry that arrives while its event's first delivery is running is
-- answered 409 (the contract's "in flight"): counted apart, not as failed.
function response(status, headers, body)
  if status == 409 then in_flight = in_flight + 1 end
end
function request()
  local d = deliveries[index]
  index = index + stride
  if index > #deliveries then index = tid + 1 end
  return wrk.format("POST", nil, headers({ ["Stripe-Signature"] = d[1], ["Content-Type"] = "application/json" }), d[2])
end
