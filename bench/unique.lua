-- wrk script: every request carries a fresh idempotency key (X-Id header),
-- unique across wrk's threads.
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(os.time() + tid)
  prefix = string.format("%d-%d-", os.time(), tid)
end

function request()
  counter = counter + 1
  local id = prefix .. counter
  return wrk.format("POST", nil, { ["X-Id"] = id, ["Content-Type"] = "application/json" },
    '{"id":"' .. id .. '","type":"bench"}')
end
