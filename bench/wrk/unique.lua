-- Every request carries a fresh idempotency key (X-Id), unique across threads.
dofile("bench/wrk/report.lua")
threads = {}
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
function init(args)
  prefix = string.format("%d-%d-%d-", os.time(), math.random(1e9), tid)
  counter = 0
end
function request()
  counter = counter + 1
  local id = prefix .. counter
  return wrk.format("POST", nil, headers({ ["X-Id"] = id, ["Content-Type"] = "application/json" }),
    '{"id":"' .. id .. '","type":"bench"}')
end
