-- SPDX-License-Identifier: MIT
-- An allocation-heavy Lua workload for bench/run.py: tables of tables, strings built and
-- dropped, a sort, and the garbage collector freeing it all (every object is a malloc
-- block through Lua's allocator function). Prints a checksum that must not depend on the
-- allocator.
local n = tonumber(arg[1]) or 200000
local items = {}
for i = 1, n do
  local k = (i * 7919) % n
  items[i] = { id = k, name = "item" .. k, tags = { k % 7, k % 11, k % 13 } }
end
table.sort(items, function(a, b) return a.id < b.id end)
local total, parts = 0, {}
for i = 1, n do
  local it = items[i]
  total = total + it.tags[1] + it.tags[2] + it.tags[3]
  if i % 10 == 0 then parts[#parts + 1] = it.name:rep(2) end
end
local joined = table.concat(parts, ",")
items, parts = nil, nil
collectgarbage()
for round = 1, 20 do
  local t = {}
  for i = 1, n // 20 do t[i] = { round, i, tostring(i * round) } end
  total = total + #t
end
print(string.format("n=%d total=%d joined=%d", n, total, #joined))
