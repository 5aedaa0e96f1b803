-- Unique events spread over ENTITIES entities (data.object.id), round
-- robin, for ordered routes (BENCHMARKS.md, "Ordered delivery").
dofile("bench/wrk/report.lua")
local threads = {}
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
function init(args)
  prefix = string.format("%d-%d-%d-", os.time(), math.random(1e9), tid)
  entities = tonumber(os.getenv("ENTITIES") or "1000")
  counter = 0
end
function request()
  counter = counter + 1
  local id = prefix .. counter
  local entity = "sub_" .. (counter % entities)
  return wrk.format("POST", nil, headers({ ["X-Id"] = id, ["Content-Type"] = "application/json" }),
    '{"id":"' .. id .. '","type":"bench","data":{"object":{"id":"' .. entity .. '"}}}')
end
