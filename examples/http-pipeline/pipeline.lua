-- wrk script for http-pipeline: pipelined GET /work requests whose answers
-- are checked for order.
--
--   wrk -t T -c C -d 10s -s pipeline.lua http://127.0.0.1:PORT -- DEPTH ROUNDS
--
-- DEPTH (default 16) requests go out at once on a connection; wrk sends the
-- next batch when all of them are answered. ROUNDS (default 1000) is the
-- n= of each request. Every request carries a distinct id,
-- "t<thread>b<batch>s<slot>": one request() call is one batch, and wrk
-- gives a batch to one connection, so the answers of a batch must come
-- back with slots 0, 1, ..., DEPTH-1, in that order.
--
-- response() runs for each answer, in the order it arrives on its
-- connection; answers of different connections of one wrk thread
-- interleave, which is why the check is per batch. It counts:
--   errors        a status other than 200, or a body without an id of this
--                 thread (or of a batch already complete)
--   out_of_order  an answer whose slot is not the next one of its batch
-- done() prints one line that the drivers read:
--   uvs-wrk: requests=N duration_us=N rps=N p50_us=N p99_us=N max_us=N
--            errors=N out_of_order=N responses=N socket_errors=N
--
-- Latency is measured here, per request: from the moment its batch is
-- handed to wrk for sending (request() returns) to the moment its answer
-- is parsed. wrk's own percentiles are not used: with pipelining, Debian's
-- wrk 4.1.0 records one sample per batch but reports percentiles above the
-- median as 0. Samples go into a histogram with 1% wide buckets.

local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } uvs_timespec_t;
int clock_gettime(int clock_id, uvs_timespec_t* tp);
]]
local ts = ffi.new("uvs_timespec_t")
local CLOCK_MONOTONIC = 1
local BUCKETS_PER_E = 100  -- bucket k holds [e^(k/100), e^((k+1)/100)) us

local function now_us()
   ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
   return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3
end

local threads = {}
local next_thread = 0

function setup(thread)
   thread:set("tid", next_thread)
   next_thread = next_thread + 1
   table.insert(threads, thread)
end

function init(args)
   -- args[0] is the URL; what follows "--" starts at args[1].
   depth = tonumber(args[1]) or 16
   rounds = tonumber(args[2]) or 1000
   batch = 0
   expected = {}  -- batch -> next slot; depth when the batch is complete
   started = {}   -- batch -> when request() returned it, us
   hist = {}      -- bucket -> count
   errors = 0
   out_of_order = 0
   responses = 0
end

function request()
   local r = {}
   for s = 0, depth - 1 do
      r[s + 1] = wrk.format("GET", string.format(
         "/work?n=%d&id=t%db%ds%d", rounds, tid, batch, s))
   end
   started[batch] = now_us()
   batch = batch + 1
   return table.concat(r)
end

function response(status, headers, body)
   responses = responses + 1
   local t, b, s = string.match(body, "^id=t(%d+)b(%d+)s(%d+) ")
   if status ~= 200 or t == nil or tonumber(t) ~= tid then
      errors = errors + 1
      return
   end
   b, s = tonumber(b), tonumber(s)
   local t0 = started[b]
   if t0 ~= nil then
      local us = now_us() - t0
      local k = us >= 1 and math.floor(math.log(us) * BUCKETS_PER_E) or 0
      hist[k] = (hist[k] or 0) + 1
      if s == depth - 1 then
         started[b] = nil
      end
   end
   local want = expected[b] or 0
   if want >= depth then
      errors = errors + 1  -- an answer for a batch already complete
   elseif s ~= want then
      out_of_order = out_of_order + 1
   end
   expected[b] = s + 1
end

-- The upper edge of the bucket where the p-th percentile falls, in us.
local function percentile(merged, keys, total, p)
   local rank, seen = math.ceil(total * p / 100), 0
   for _, k in ipairs(keys) do
      seen = seen + merged[k]
      if seen >= rank then
         return math.exp((k + 1) / BUCKETS_PER_E)
      end
   end
   return 0
end

function done(summary, latency, requests)
   local e = summary.errors
   local errs, ooo, resp = 0, 0, 0
   local merged, keys, total = {}, {}, 0
   for _, thread in ipairs(threads) do
      errs = errs + thread:get("errors")
      ooo = ooo + thread:get("out_of_order")
      resp = resp + thread:get("responses")
      for k, n in pairs(thread:get("hist")) do
         if merged[k] == nil then
            merged[k] = 0
            table.insert(keys, k)
         end
         merged[k] = merged[k] + n
         total = total + n
      end
   end
   table.sort(keys)
   local secs = summary.duration / 1e6
   io.write(string.format(
      "uvs-wrk: requests=%d duration_us=%d rps=%.0f p50_us=%.0f " ..
      "p99_us=%.0f max_us=%.0f errors=%d out_of_order=%d responses=%d " ..
      "socket_errors=%d\n",
      summary.requests, summary.duration, summary.requests / secs,
      percentile(merged, keys, total, 50), percentile(merged, keys, total, 99),
      percentile(merged, keys, total, 100), errs + e.status, ooo, resp,
      e.connect + e.read + e.write + e.timeout))
end
