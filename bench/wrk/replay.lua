-- Every request is a duplicate of one completed event: the replay path.
dofile("bench/wrk/report.lua")
wrk.method = "POST"
wrk.headers["X-Id"] = "bench-replay"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"id":"bench-replay","type":"bench"}'
