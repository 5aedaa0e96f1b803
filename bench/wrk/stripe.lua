-- Stripe-signed deliveries from a file (`load sign`), a share of them retries
-- of earlier events. Thread i sends lines i, i+T, i+2T, ... and wraps around.
dofile("bench/wrk/report.lua")
local threads = {}
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
end
function request()
  local d = deliveries[index]
  index = index + stride
  if index > #deliveries then index = tid + 1 end
  return wrk.format("POST", nil, headers({ ["Stripe-Signature"] = d[1], ["Content-Type"] = "application/json" }), d[2])
end
