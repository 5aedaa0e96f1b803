-- unique.lua in front of a route whose queue can fill: a new event past
-- the route's bound is answered 503 queue_full (the contract's answer; the
-- sender keeps the event), counted apart and not as failed.
dofile("bench/wrk/unique.lua")
local unique_init = init
function init(args)
  unique_init(args)
  queue_full = 0
end
function response(status, headers, body)
  if status == 503 then queue_full = queue_full + 1 end
end
