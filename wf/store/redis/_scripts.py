"""The Lua scripts of the Redis store: every write, claim and check that must be atomic.

Redis runs a script alone, so a script's reads and writes are one atomic step across every
client: a claim reads the queue and takes leases in one script, never read-then-write across
round trips. Every script gets the key prefix as ``ARGV[1]`` and builds its keys from it (see
``docs/redis.md`` for the key layout); a script that writes for a lease first checks the
lease's fencing token (``lease:<id>`` must still hold the ``<epoch>:<call>:<holder>`` the
lease was taken with).

A value of one run's that a script cannot use (its hash replaced by a string, a journal that
is no list, an epoch or creation number that is no number: a stray write) is that run's
damage: the scripts read a run's keys through ``at``, which raises it as ``{err = 'WFDAMAGE
where: why'}`` (an error of the server's, such as out of memory, is raised as it was: never a
run's).
The claim and the listing catch it per run (the run is passed over, its id and the reason
returned for the caller to name, everything else goes on); a script about one run
replies it as an error starting ``WFDAMAGE`` (``StoreCorrupted`` in Python). Every script reads
what it needs before its first write, so damage found never leaves a write half done (a lease
taken, events appended without their record).
"""

from __future__ import annotations

from wf.store._base import RunStatus

_PRELUDE = """
local P = ARGV[1]
local TERMINAL = {completed = true, failed = true, cancelled = true}
local function rkey(id) return P .. 'r:' .. id end
local function qkey(qk) return P .. 'q:' .. qk end
-- Takes the run out of the queue (qk, qm: its queue key and member, when already read).
local function unqueue(rk, qk, qm)
  if qk == nil then qk = redis.call('HGET', rk, 'qk') end
  if qk and qk ~= '' then
    local key = qkey(qk)
    redis.call('ZREM', key, qm or redis.call('HGET', rk, 'qm'))
    if redis.call('ZCARD', key) == 0 then redis.call('ZREM', P .. 'qk', qk) end
    redis.call('HSET', rk, 'qk', '')
  end
end
local function enqueue(rk, qk, prio, due)
  local old = redis.call('HGET', rk, 'qk')
  if old ~= qk then unqueue(rk) end
  redis.call('ZADD', qkey(qk), due, redis.call('HGET', rk, 'qm'))
  redis.call('ZADD', P .. 'qk', prio, qk)
  redis.call('HSET', rk, 'qk', qk)
end
-- Damage of one run's: raised, to be caught per run (``caught``) or replied (``replied``).
-- As a table with ``err``: one that left a script uncaught is replied as a WFDAMAGE error,
-- where a table without ``err`` crashes Redis 7.0 (a NULL message in luaCallFunction). Redis
-- hands such a table to a ``pcall`` as its ``err`` text alone, which ``caught`` reads.
local function damage(where, why) error({err = 'WFDAMAGE ' .. where .. ': ' .. why}, 0) end
local DAMAGE_ERRORS = {'WRONGTYPE', 'not an integer', 'not a valid float'}
-- Whether an error's text is one only a value of the wrong type or form makes.
local function of_value(text)
  for _, mark in ipairs(DAMAGE_ERRORS) do
    if string.find(text, mark, 1, true) then return true end
  end
  return false
end
-- A command on a run's key: an error a value of its makes (a key of another type, a field
-- that is no number) is that run's damage; any other (out of memory, a read-only replica, a
-- server busy or loading) is the server's, raised as it was: the script fails, the caller
-- gets a store failure and tries again later, and the run is not blamed.
local function at(where, cmd, key, ...)
  local found = redis.pcall(cmd, key, ...)
  if type(found) == 'table' and found.err then
    if of_value(found.err) then damage(where, found.err) end
    error(found, 0)
  end
  return found
end
-- What a pcall caught, if it is damage (also an error of a command not read through ``at``
-- that only a value of the wrong type or form makes); nil for anything else (not the run's).
local function caught(e)
  local text = type(e) == 'table' and e.err or tostring(e)
  if string.sub(text, 1, 9) == 'WFDAMAGE ' then return string.sub(text, 10) end
  if of_value(text) then return text end
  return nil
end
-- Runs fn(...) for a script about one run: damage is replied as a WFDAMAGE error (no write of
-- the script's was made: they come after its reads); any other error is raised as it was.
local function replied(fn, ...)
  local out = {pcall(fn, ...)}
  if out[1] then return unpack(out, 2, table.maxn(out)) end
  local result = out[2]
  local found = caught(result)
  if found then return redis.error_reply('WFDAMAGE ' .. found) end
  error(result, 0)
end
-- The run that holds hook token (its record's run_id), or nil when the token is free; a record
-- that cannot be read (no JSON object with a run id: a stray write) is that field's damage.
local function hook_owner(token)
  local found = at(P .. 'hooks', 'HGET', P .. 'hooks', token)
  if not found then return nil end
  local ok, hook = pcall(cjson.decode, found)
  if not ok or type(hook) ~= 'table' or type(hook['run_id']) ~= 'string' then
    damage("field '" .. token .. "' of " .. P .. 'hooks', 'not a hook record')
  end
  return hook['run_id']
end
-- Whether the lease of run id is still the one of token: its key holds the token, or the key
-- lapsed (its process could not renew it in time: its event loop was blocked, or Redis out of
-- reach for a while) and nobody took the run since: every taking bumps the run's fencing
-- epoch, the token's first part. A lapsed lease is taken back, for ttl ms when given (as a
-- PostgreSQL session lock outlives a blocked loop); one another driver took is lost.
local function fenced(id, token, ttl)
  local lk = P .. 'lease:' .. id
  local found = redis.pcall('GET', lk)
  if found == token then return true end
  if found then return false end  -- another token, or a key of another type
  local epoch = string.match(token, '^([^:]*):')
  if not epoch or redis.pcall('HGET', rkey(id), 'ep') ~= epoch then return false end
  if ttl then redis.call('SET', lk, token, 'PX', ttl) end
  return true
end
-- A set of the ids of a JSON list.
local function idset(json)
  local set = {}
  for _, x in ipairs(cjson.decode(json)) do set[x] = true end
  return set
end
-- Whether a lease key may be taken: it is absent, or its token '<epoch>:<call>:<holder>'
-- names a holder that is one of dead, or the call (a claim sent again after its reply was
-- lost: what the lost attempt took is taken again). Also returns the holder found.
local function takeable(lk, dead, call)
  local token = redis.pcall('GET', lk)
  if not token or type(token) ~= 'string' then return true, nil end
  local taker, holder = string.match(token, '^[^:]*:([^:]*):([^:]*)$')
  -- A value wf never writes (a stray SET, another type) holds nothing: it is taken over.
  if not holder then return true, nil end
  if dead[holder] or taker == call then return true, holder end
  return false, holder
end
-- Due runs in queue order (priority, due time, creation), calling visit(id, member, key) for
-- each (its queue member and the queue's key) until
-- it returns true; at most budget are looked at. queues: nil (all) or a set of queue tags;
-- pins: nil (all) or a set of deployment ids ('' for unpinned runs). A run whose pin cannot
-- be read is passed over, and added to bad (when given) as {id, why}.
local function each_due(now, queues, pins, budget, visit, bad)
  local qks = redis.pcall('ZREVRANGE', P .. 'qk', 0, -1, 'WITHSCORES')
  -- The queues' index of another type (a stray write): an error reply naming it. Raised as
  -- a table with ``err``, never ``damage``'s: a table without ``err`` that leaves a script
  -- crashes Redis 7.0 (a NULL message in luaCallFunction).
  if qks.err then error({err = 'WFDAMAGE ' .. P .. 'qk: ' .. qks.err}, 0) end
  local levels, order = {}, {}
  for i = 1, #qks, 2 do
    local qk, prio = qks[i], qks[i + 1]
    local bar = string.find(qk, '|', 1, true)
    local tag = bar and string.sub(qk, bar + 1)
    if tag and (queues == nil or queues[tag]) then
      if levels[prio] == nil then levels[prio] = {}; order[#order + 1] = prio end
      table.insert(levels[prio], {key = qkey(qk), buf = {}, pos = 1, off = 0, done = false})
    end
  end
  local page = 200
  local function head(s)
    if s.pos > #s.buf then
      if s.done then return nil end
      s.buf = redis.pcall('ZRANGEBYSCORE', s.key, '-inf', now, 'WITHSCORES', 'LIMIT', s.off, page)
      if s.buf.err then
        -- A queue key of another type (a stray write): its runs wait, named (in bad, as
        -- {key, why, 'queue'}) and by verify; the other queues go on.
        if bad then bad[#bad + 1] = {s.key, s.buf.err, 'queue'} end
        s.buf, s.done = {}, true
        return nil
      end
      s.pos = 1
      s.off = s.off + #s.buf / 2
      if #s.buf < page * 2 then s.done = true end
      if #s.buf == 0 then return nil end
    end
    return s.buf[s.pos], tonumber(s.buf[s.pos + 1])
  end
  for _, prio in ipairs(order) do
    local streams = levels[prio]
    while budget > 0 do
      local best, bm, bs = nil, nil, nil
      for _, s in ipairs(streams) do
        local m, sc = head(s)
        if m ~= nil and (best == nil or sc < bs or (sc == bs and m < bm)) then
          best, bm, bs = s, m, sc
        end
      end
      if best == nil then break end
      best.pos = best.pos + 2
      budget = budget - 1
      local id = string.sub(bm, 17)
      local pinned = true
      if pins ~= nil then
        local pin = redis.pcall('HGET', rkey(id), 'pin')
        if type(pin) == 'table' and pin.err then
          pinned = false
          if bad then bad[#bad + 1] = {id, rkey(id) .. ': ' .. pin.err} end
        else
          pinned = pins[pin or ''] ~= nil
        end
      end
      if pinned then
        if visit(id, bm, best.key) then return end
      end
    end
  end
end
local function tagset(json)
  local list = cjson.decode(json)
  if list == cjson.null then return nil end
  local set = {}
  for _, tag in ipairs(list) do set[tag] = true end
  return set
end
local function pinset(json)
  local list = cjson.decode(json)
  if list == cjson.null then return nil end
  local set = {}
  for _, pin in ipairs(list) do
    if pin == cjson.null then set[''] = true else set[pin] = true end
  end
  return set
end
-- The listings' indexes are written with pcall: an index a stray write replaced by another type
-- fails its listing (naming it) and is named by verify, never the run's write, which would
-- stop half done (its events appended, its record not saved) and fail every run of a status.
local function add_index(id, seq, status, workflow, parent)
  redis.pcall('ZADD', P .. 'ix:all', seq, id)
  redis.pcall('ZADD', P .. 'ix:s:' .. status, seq, id)
  redis.pcall('ZADD', P .. 'ix:w:' .. workflow, seq, id)
  if parent ~= '' then redis.pcall('ZADD', P .. 'ix:p:' .. parent, seq, id) end
end
local function drop_index(id, status, workflow, parent)
  redis.pcall('ZREM', P .. 'ix:all', id)
  redis.pcall('ZREM', P .. 'ix:s:' .. status, id)
  redis.pcall('ZREM', P .. 'ix:w:' .. workflow, id)
  if parent ~= '' then redis.pcall('ZREM', P .. 'ix:p:' .. parent, id) end
end
"""

CREATE = (
    _PRELUDE
    + """
-- ARGV: P, id, record, status, workflow, parent, qk, prio, due, lane, width, pin, seq,
--       events...
-- (seq: the creation number the caller took with INCR P..'seq' and stamped in the record)
-- Returns 1 when the run is created, 0 when the id is taken. Idempotent: the creation number
-- is this call's own (no other creation takes it), so a run of this id with this number is
-- this very creation, sent again after its reply was lost: it is answered as created.
local id = ARGV[2]
local rk = rkey(id)
if redis.call('EXISTS', rk) == 1 then
  local made = redis.pcall('HGET', rk, 'seq')
  if type(made) == 'string' and tonumber(made) == tonumber(ARGV[13]) then return 1 end
  return 0
end
local status, group = ARGV[4], ARGV[10]
local seq = tonumber(ARGV[13])
-- Every key it writes (but the indexes, which tolerate damage) read first: a key of another
-- type is a WFDAMAGE error naming it before anything is written, never a record without its
-- queue entry or journal that a retry would then take for the run.
local jk = P .. 'j:' .. id
at(jk, 'LLEN', jk)
if not TERMINAL[status] then
  local qk = qkey(ARGV[7])
  at(qk, 'ZCARD', qk)
  at(P .. 'qk', 'ZCARD', P .. 'qk')
  if group ~= '' then at(P .. 'g:' .. group, 'ZCARD', P .. 'g:' .. group) end
end
redis.call('HSET', rk, 'id', id, 'rec', ARGV[3], 'st', status, 'wf', ARGV[5], 'par', ARGV[6],
  'seq', seq, 'ep', 0, 'qm', string.format('%016d', seq) .. id, 'qk', '', 'grp', group,
  'gw', ARGV[11], 'pin', ARGV[12], 'lane', '')
add_index(id, seq, status, ARGV[5], ARGV[6])
if not TERMINAL[status] then
  enqueue(rk, ARGV[7], ARGV[8], ARGV[9])
  if group ~= '' then
    redis.call('ZADD', P .. 'g:' .. group, seq, id)
    redis.call('HSET', rk, 'lane', seq)
  end
end
if #ARGV >= 14 then redis.call('RPUSH', jk, unpack(ARGV, 14)) end
redis.call('PUBLISH', P .. 'cq', id)
return 1
"""
)

CREATE_EXPLICIT = CREATE.replace(
    "local rk = rkey(id)\n",
    "local rk = rkey(id)\n"
    "if redis.call('EXISTS', rk) == 0 and redis.call('HEXISTS', P .. 'tomb', id) == 1 then\n"
    "  return 0  -- deleted: a tombstone keeps the id its run's\n"
    "end\n",
)
"""``CREATE`` of an id the caller gave: none while a tombstone says its run was deleted."""
assert CREATE_EXPLICIT != CREATE

WRITE = (
    _PRELUDE
    + """
-- A lease's write: events to append and/or a record to save, fenced, and idempotent: the
-- journal must be as long as the lease last left it, and a write sent again after its reply
-- was lost (the events are there already) is answered as done without writing twice.
-- ARGV: P, id, token, ttl (ms: a lapsed lease taken back, ``fenced``), length, save?, then
--       when save? is '1': record, status, workflow, parent, qk, prio, due, lane, width, pin;
--       then events... (an append alone sends no record fields). Returns 0 (fenced off),
--       -1 (the journal changed under the lease), else the journal's new length + 1. A run
--       whose keys cannot be used (its journal no list, its creation number no number): a
--       WFDAMAGE error, nothing written.
local id, token = ARGV[2], ARGV[3]
if not fenced(id, token, ARGV[4]) then return 0 end
local rk = rkey(id)
local jk = P .. 'j:' .. id
local first = 7
if ARGV[6] == '1' then first = 17 end
local length, count = tonumber(ARGV[5]), #ARGV - first + 1
-- Every read first: damage found leaves no write half done.
local now, old, inbox = replied(function()
  local now = at(jk, 'LLEN', jk)
  if ARGV[6] ~= '1' then return now end
  local old = at(rk, 'HMGET', rk, 'st', 'wf', 'par', 'grp', 'lane', 'seq', 'qk', 'qm')
  if not tonumber(old[6]) then damage("field 'seq' of " .. rk, 'not a number') end
  return now, old, at(P .. 'in:' .. id, 'HLEN', P .. 'in:' .. id)
end)
if type(now) == 'table' then return now end  -- damage, replied
if count > 0 and now == length + count then return now + 1 end
if now ~= length then return -1 end
if count > 0 then now = redis.call('RPUSH', jk, unpack(ARGV, first)) end
if ARGV[6] ~= '1' then
  redis.call('PUBLISH', P .. 'cr', id)
  return now + 1
end
local status, workflow, parent, group = ARGV[8], ARGV[9], ARGV[10], ARGV[14]
-- Only the listings that change (a save most often changes the status alone).
local seq = old[6]
if old[1] ~= status then
  redis.pcall('ZREM', P .. 'ix:s:' .. old[1], id)
  redis.pcall('ZADD', P .. 'ix:s:' .. status, seq, id)
end
if old[2] ~= workflow then
  redis.pcall('ZREM', P .. 'ix:w:' .. old[2], id)
  redis.pcall('ZADD', P .. 'ix:w:' .. workflow, seq, id)
end
if old[3] ~= parent then
  if old[3] ~= '' then redis.pcall('ZREM', P .. 'ix:p:' .. old[3], id) end
  if parent ~= '' then redis.pcall('ZADD', P .. 'ix:p:' .. parent, seq, id) end
end
redis.call('HSET', rk, 'rec', ARGV[7], 'st', status, 'wf', workflow, 'par', parent,
  'grp', group, 'gw', ARGV[15], 'pin', ARGV[16])
if TERMINAL[status] then
  unqueue(rk, old[7] or '', old[8])
else
  local due = ARGV[13]
  if due ~= '0' and inbox > 0 then due = '0' end
  if old[7] == ARGV[11] then
    redis.call('ZADD', qkey(ARGV[11]), due, old[8])  -- same queue: its due time alone
  else
    enqueue(rk, ARGV[11], ARGV[12], due)
  end
end
-- The lane: an end leaves it; a run queued again after an end (wf retry) re-enters at the back.
local lane = old[5]
local left = false
if lane ~= '' and (TERMINAL[status] or old[4] ~= group) then
  redis.call('ZREM', P .. 'g:' .. old[4], id)
  redis.call('HSET', rk, 'lane', '')
  lane = ''
  left = true
end
if lane == '' and group ~= '' and not TERMINAL[status] then
  local seq = redis.call('INCR', P .. 'seq')
  redis.call('ZADD', P .. 'g:' .. group, seq, id)
  redis.call('HSET', rk, 'lane', seq)
end
-- The run is leased: what its save changes in the queue can be claimed only once the lease
-- is released (``RELEASE`` announces it). Only a run leaving its lane makes another startable
-- now (the next of the lane); every other save is news for the run's watchers alone.
if left then
  redis.call('PUBLISH', P .. 'cq', id)
else
  redis.call('PUBLISH', P .. 'cr', id)
end
return now + 1
"""
)

ACQUIRE = (
    _PRELUDE
    + """
-- ARGV: P, id, ttl (ms), holder, dead holders (JSON list), call (a random word: the same
-- when sent again). Returns {-1} (no such run), {0, holder} (held, and by whom), or {1,
-- token, the journal's length, the creation number}: the token '<epoch>:<call>:<holder>'
-- with the run's bumped fencing epoch. A run whose epoch, creation number or journal cannot be
-- used: a WFDAMAGE error, nothing taken.
local id = ARGV[2]
local rk = rkey(id)
if redis.call('EXISTS', rk) == 0 then return {-1} end
local lk = P .. 'lease:' .. id
local free, holder = takeable(lk, idset(ARGV[5]), ARGV[6])
if not free then return {0, holder or ''} end
return replied(function()
  local jk = P .. 'j:' .. id
  local length = at(jk, 'LLEN', jk)
  local seq = at(rk, 'HGET', rk, 'seq')
  if not tonumber(seq) then damage("field 'seq' of " .. rk, 'not a number') end
  local epoch = at("field 'ep' of " .. rk, 'HINCRBY', rk, 'ep', 1)
  local token = epoch .. ':' .. ARGV[6] .. ':' .. ARGV[4]
  redis.call('SET', lk, token, 'PX', ARGV[3])
  return {1, token, length, seq}
end)
"""
)

CLAIM = (
    _PRELUDE
    + """
-- ARGV: P, now, limit, ttl (ms), queue tags (JSON or null), exclude (JSON list), budget,
--       pins (JSON or null), holder, dead holders (JSON list), call (as ACQUIRE's).
-- Returns {leased, held, waiting, holders, damaged}: leased = {id, token, record, journal,
-- inbox} per run; holders: the holders of the held runs (each once); damaged: {id, why} per
-- run passed over because a value of its own cannot be used (nothing of it taken).
local now, limit, ttl, me, call = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[9], ARGV[11]
local exclude = idset(ARGV[6])
local dead = idset(ARGV[10])
local leased, held, waiting, holders, seen, checked = {}, {}, {}, {}, {}, {}
local damaged = {}
-- A lane's first places belong to runs of that lane: a member that is no such run's (deleted
-- or evicted by hand, a stray write) would hold a place for good, so it is dropped. A member
-- whose hash is of another type is a damaged run (named where the claim meets it), not a
-- gone one: it keeps its place and the lane waits, as behind any damaged run of it (made
-- whole again, it must not run beside the runs behind it).
local function drop_strays(gk, group, width)
  for _ = 1, 100 do
    local clean = true
    for _, m in ipairs(redis.call('ZRANGE', gk, 0, width - 1)) do
      local f = redis.pcall('HMGET', rkey(m), 'grp', 'lane')
      if not f.err and (f[1] ~= group or not f[2] or f[2] == '') then
        redis.call('ZREM', gk, m); clean = false
      end
    end
    if clean then return end
  end
end
-- One free run: leased, or passed over (its member stray, or waiting in its lane). Everything
-- its driver reads first is read before its lease is taken: damage found leaves nothing taken.
local function take(id, member, key, lk)
  local rk = rkey(id)
  local f = at(rk, 'HMGET', rk, 'grp', 'lane', 'gw', 'qm', 'seq')
  if f[4] ~= member then
    -- The run's own member (its creation number and id) beside a queue member field that
    -- says otherwise: that field is damaged (a stray write), named; the entry is kept for
    -- verify to rebuild the field (dropped, the run never ran).
    if tonumber(f[5]) and member == string.format('%016d', tonumber(f[5])) .. id then
      damage("field 'qm' of " .. rk, "not the run's queue member " .. member)
    end
    -- A member that is no run's (its run deleted or evicted by hand, a stray write): every
    -- write keeps a run's member and its hash together, so it is dropped, not claimed.
    redis.call('ZREM', key, member)
    return false
  end
  -- No write of the run's could index it: not driven (its steps would run for nothing).
  if not tonumber(f[5]) then damage("field 'seq' of " .. rk, 'not a number') end
  if f[1] and f[1] ~= '' and f[2] ~= '' then
    -- A place that is not a finite number (a stray write; Lua's tonumber takes 'nan' and
    -- 'inf', which ZCOUNT refuses, failing the whole claim): the run's damage, named (and
    -- then it holds no place in its lane: the runs behind it go on).
    local place = tonumber(f[2])
    if not place or place ~= place or math.abs(place) == math.huge then
      damage("field 'lane' of " .. rk, 'not a number')
    end
    local gk = P .. 'g:' .. f[1]
    -- The lane key of another type (a stray write): named as each of its runs' damage (it
    -- was their hashes' WRONGTYPE), the lane's runs wait and the others go on.
    at(gk, 'ZCARD', gk)
    -- A run of the lane that is not in its lane key (the key deleted by hand, or evicted):
    -- the runs ahead of it may be missing too, one of them running, so it is named and
    -- waits rather than run beside them; verify puts the lane's runs back (their places are
    -- in their hashes).
    if not redis.call('ZSCORE', gk, id) then
      damage(gk, 'the run is not in its lane (the key deleted?): the lane waits until'
        .. ' wf store verify puts its runs back')
    end
    -- A width that is not a count of at least 1 (a stray write: 0 would hold the lane for
    -- good, a fraction or 'inf' would fail ZRANGE): one at a time, as most lanes are.
    local width = tonumber(f[3])
    if not width or width ~= width or width < 1 then width = 1 end
    width = math.floor(math.min(width, 10000))
    if not checked[gk] then checked[gk] = true; drop_strays(gk, f[1], width) end
    local ahead = redis.call('ZCOUNT', gk, '-inf', '(' .. string.format('%.17g', place))
    if ahead >= width then waiting[#waiting + 1] = id; return false end
  end
  local jk, ik = P .. 'j:' .. id, P .. 'in:' .. id
  local record = at(rk, 'HGET', rk, 'rec')
  local journal = at(jk, 'LRANGE', jk, 0, -1)
  local inbox = at(ik, 'HGETALL', ik)
  local epoch = at("field 'ep' of " .. rk, 'HINCRBY', rk, 'ep', 1)
  local token = epoch .. ':' .. call .. ':' .. me
  redis.call('SET', lk, token, 'PX', ttl)
  leased[#leased + 1] = {id, token, record, journal, inbox}
  return #leased >= limit
end
each_due(now, tagset(ARGV[5]), pinset(ARGV[8]), tonumber(ARGV[7]), function(id, member, key)
  if exclude[id] then return false end
  local lk = P .. 'lease:' .. id
  local free, holder = takeable(lk, dead, call)
  if not free then
    held[#held + 1] = id
    if holder and not seen[holder] then seen[holder] = true; holders[#holders + 1] = holder end
    return false
  end
  local ok, result = pcall(take, id, member, key, lk)
  if ok then return result end
  local why = caught(result)
  if not why then error(result, 0) end  -- not the run's: the claim fails, as any script
  damaged[#damaged + 1] = {id, why}
  return false
end, damaged)
return {leased, held, waiting, holders, damaged}
"""
)

DUE = (
    _PRELUDE
    + """
-- ARGV: P, now, limit, queue tags (JSON or null), pins (JSON or null).
local out = {}
local limit = tonumber(ARGV[3])
if limit <= 0 then return out end
each_due(ARGV[2], tagset(ARGV[4]), pinset(ARGV[5]), limit, function(id)
  out[#out + 1] = id
  return #out >= limit
end)
return out
"""
)

NEXT_DUE = """
-- ARGV: P, after ('' for none), queue tags (JSON list or null). The earliest finite due time
-- (later than after), or false.
local P = ARGV[1]
local low = '-inf'
if ARGV[2] ~= '' then low = '(' .. ARGV[2] end
local wanted = cjson.decode(ARGV[3])
local tags = nil
if wanted ~= cjson.null then
  tags = {}
  for _, tag in ipairs(wanted) do tags[tag] = true end
end
local best = nil
local qks = redis.pcall('ZRANGE', P .. 'qk', 0, -1)
if qks.err then return redis.error_reply('WFDAMAGE ' .. P .. 'qk: ' .. qks.err) end
for _, qk in ipairs(qks) do
  local bar = string.find(qk, '|', 1, true)  -- none: a stray member, no queue of wf's
  local tag = bar and string.sub(qk, bar + 1)
  if tag and (tags == nil or tags[tag]) then
    local got = redis.pcall('ZRANGEBYSCORE', P .. 'q:' .. qk, low, '(+inf', 'WITHSCORES',
      'LIMIT', 0, 1)
    if got.err then got = {} end  -- a queue key of another type: skipped, as by claims
    if #got > 0 and (best == nil or tonumber(got[2]) < tonumber(best)) then best = got[2] end
  end
end
if best == nil then return false end
return best
"""

RELEASE = (
    _PRELUDE
    + """
-- ARGV: P, id, token. Gives the lease back if it is still this one, and tells the workers
-- when the run may be claimed now (a finished run's release makes nothing startable: its end
-- was announced by its write, and workers need not wake for it).
local id = ARGV[2]
local lk = P .. 'lease:' .. id
if fenced(id, ARGV[3]) then
  redis.call('DEL', lk)
  local status = redis.call('HGET', rkey(id), 'st')
  if status and not TERMINAL[status] then redis.call('PUBLISH', P .. 'cq', id) end
  return 1
end
return 0
"""
)

RENEW = (
    _PRELUDE
    + """
-- ARGV: P, ttl (ms), then key, token pairs (keys without the prefix). Extends each key that
-- still holds its token, and takes back a run's lease that lapsed while nobody took the run
-- (``fenced``); returns the 1-based pair numbers of the others. (A slot or a schedule lock
-- that lapsed is lost: nothing says whether another process held it meanwhile.)
local ttl = ARGV[2]
local lost = {}
for i = 3, #ARGV, 2 do
  local key, token = ARGV[i], ARGV[i + 1]
  if redis.pcall('GET', P .. key) == token then
    redis.call('PEXPIRE', P .. key, ttl)
  elseif not (string.sub(key, 1, 6) == 'lease:' and fenced(string.sub(key, 7), token, ttl)) then
    lost[#lost + 1] = (i - 1) / 2
  end
end
return lost
"""
)

UNLOCK = """
-- ARGV: P, key (without the prefix), token, channel suffix ('' for none).
local P = ARGV[1]
if redis.call('GET', P .. ARGV[2]) == ARGV[3] then
  redis.call('DEL', P .. ARGV[2])
  if ARGV[4] ~= '' then redis.call('PUBLISH', P .. ARGV[4], '') end
  return 1
end
return 0
"""

_POSTABLE = """
-- What a driver reads of a run to take in a message to it (its inbox and journal, its epoch
-- and creation number, with which it takes the lease), read before anything is written: a
-- value a stray write damaged is a WFDAMAGE error naming it, and nothing is written (the
-- message would wait in an inbox no driver can take in; the message counter, bumped).
local function postable(rk, id)
  local f = at(rk, 'HMGET', rk, 'ep', 'seq')
  if f[1] and not tonumber(f[1]) then damage("field 'ep' of " .. rk, 'not a number') end
  if not tonumber(f[2]) then damage("field 'seq' of " .. rk, 'not a number') end
  local ik, jk = P .. 'in:' .. id, P .. 'j:' .. id
  at(ik, 'HLEN', ik)
  at(jk, 'LLEN', jk)
end
"""

POST = (
    _PRELUDE
    + _POSTABLE
    + """
-- ARGV: P, id, message (JSON [kind, data]). Returns the message id, or false: no such run.
local id = ARGV[2]
local rk = rkey(id)
if redis.call('EXISTS', rk) == 0 then return false end
local refused = replied(function() postable(rk, id); return false end)
if refused then return refused end
local mid = string.format('m%016d', redis.call('INCR', P .. 'mseq'))
redis.call('HSET', P .. 'in:' .. id, mid, ARGV[3])
local f = redis.call('HMGET', rk, 'st', 'qk', 'qm')
if not TERMINAL[f[1]] and f[2] ~= '' then redis.call('ZADD', qkey(f[2]), 0, f[3]) end
redis.call('PUBLISH', P .. 'cq', id)
return mid
"""
)

POST_ONCE = (
    _PRELUDE
    + _POSTABLE
    + """
-- ARGV: P, id, message (JSON [kind, data]), delivery id, delivery (JSON), its time.
-- Returns {1, message id} when posted (the delivery kept with it), {0, delivery} when one was
-- kept under the id already (nothing posted), or false: no such run.
local id, key = ARGV[2], ARGV[4]
local kept = redis.call('HGET', P .. 'deliveries', key)
if kept then return {0, kept} end
local rk = rkey(id)
if redis.call('EXISTS', rk) == 0 then return false end
local refused = replied(function() postable(rk, id); return false end)
if refused then return refused end
redis.call('HSET', P .. 'deliveries', key, ARGV[5])
redis.call('ZADD', P .. 'delivered', ARGV[6], key)
local mid = string.format('m%016d', redis.call('INCR', P .. 'mseq'))
redis.call('HSET', P .. 'in:' .. id, mid, ARGV[3])
local f = redis.call('HMGET', rk, 'st', 'qk', 'qm')
if not TERMINAL[f[1]] and f[2] ~= '' then redis.call('ZADD', qkey(f[2]), 0, f[3]) end
redis.call('PUBLISH', P .. 'cq', id)
return {1, mid}
"""
)

REGISTER_HOOK = (
    _PRELUDE
    + """
-- ARGV: P, token, run id, hook (JSON). Returns false when claimed, else the owner's run id;
-- a WFDAMAGE error (nothing written) when the token's record cannot be read.
local token, run = ARGV[2], ARGV[3]
return replied(function()
  local owner = hook_owner(token)
  if owner and owner ~= run then return owner end
  redis.call('HSET', P .. 'hooks', token, ARGV[4])
  redis.call('SADD', P .. 'rh:' .. run, token)
  redis.call('PUBLISH', P .. 'cq', run)
  return false
end)
"""
)

RELEASE_HOOK = (
    _PRELUDE
    + """
-- ARGV: P, token, run id. A WFDAMAGE error (nothing written) when the token's record cannot
-- be read.
local token, run = ARGV[2], ARGV[3]
return replied(function()
  if hook_owner(token) == run then
    redis.call('HDEL', P .. 'hooks', token)
    redis.call('SREM', P .. 'rh:' .. run, token)
  end
  return 0
end)
"""
)

WRITE_CHUNK = """
-- ARGV: P, id, stream, index, data. Idempotent by index: the first write of an index wins.
local P, id, name = ARGV[1], ARGV[2], ARGV[3]
local key = P .. 'sc:' .. id .. ':' .. name
redis.call('HSETNX', P .. 'sn:' .. id, name, '0')
if redis.call('LLEN', key) == tonumber(ARGV[4]) then redis.call('RPUSH', key, ARGV[5]) end
redis.call('PUBLISH', P .. 'cr', id)
return 0
"""

CLOSE_STREAM = """
-- ARGV: P, id, stream.
local P, id = ARGV[1], ARGV[2]
redis.call('HSET', P .. 'sn:' .. id, ARGV[3], '1')
redis.call('PUBLISH', P .. 'cr', id)
return 0
"""

CHUNK_BATCH = (
    _PRELUDE
    + """
-- ARGV: P, id, stream, start, budget, most. Returns false (no such run) or {closed, chunk, ...}:
-- the chunks from ``start`` while within ``budget`` bytes (the first always), at most
-- ``most``. Fetched one at a time: a list gives no element's size, so any chunk not yet seen
-- may be big, and fetching several at once could pull many big chunks into the script's
-- memory (while it blocks the server) to return none of them. One at a time pulls at most
-- one chunk past the batch; each fetch is a cheap seek, so many small chunks stay cheap.
local P, id, name = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', P .. 'r:' .. id) == 0 then return false end
local key = P .. 'sc:' .. id .. ':' .. name
local function checked(found, where)
  if type(found) == 'table' and found.err then
    if of_value(found.err) then damage(where, found.err) end
    error(found, 0)
  end
  return found
end
local closed = checked(redis.pcall('HGET', P .. 'sn:' .. id, name), P .. 'sn:' .. id)
local i, budget, most = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local out, size = {closed == '1' and 1 or 0}, 0
while #out - 1 < most do
  local chunk = checked(redis.pcall('LINDEX', key, i), key)
  if not chunk then break end
  if #out > 1 and size + #chunk > budget then break end
  out[#out + 1] = chunk
  size, i = size + #chunk, i + 1
end
return out
"""
)

STREAMS = """
-- ARGV: P, id. Returns false (no such run) or {fault, name, count, closed, ...}. ``fault`` is
-- '' or what the server said of the run's hash of stream names, of another type (a stray
-- write's): no stream is listed from it. A stream whose chunks' key is of another type has
-- count -1 and, for closed, what the server said. Damage is replied, never raised: the
-- caller leaves that stream out and names it, and the run's other streams are listed. An
-- error of the server's (not a value's) is raised as it was.
local P, id = ARGV[1], ARGV[2]
if redis.call('EXISTS', P .. 'r:' .. id) == 0 then return false end
local function wrong_type(found)
  if type(found) ~= 'table' or not found.err then return false end
  if string.find(found.err, 'WRONGTYPE', 1, true) then return true end
  error(found, 0)
end
local names = redis.pcall('HGETALL', P .. 'sn:' .. id)
if wrong_type(names) then return {names.err} end
local out = {''}
for i = 1, #names, 2 do
  local count = redis.pcall('LLEN', P .. 'sc:' .. id .. ':' .. names[i])
  out[#out + 1] = names[i]
  if wrong_type(count) then
    out[#out + 1] = -1
    out[#out + 1] = count.err
  else
    out[#out + 1] = count
    out[#out + 1] = names[i + 1]
  end
end
return out
"""

APPEND_LOGS = """
-- ARGV: P, id, entries...
local P, id = ARGV[1], ARGV[2]
redis.call('RPUSH', P .. 'lg:' .. id, unpack(ARGV, 3))
redis.call('PUBLISH', P .. 'cr', id)
return 0
"""

LIST = """
-- ARGV: P, index keys (JSON list, without the prefix), below (creation number; '' for none),
--       limit, budget, statuses (JSON list or null), workflow (''), parent (''),
--       record fields to match (JSON object: queue, group, deployment; '{}' for none).
-- Returns {records, cursor, damaged}: records alternate a run's id and its record; cursor is
-- the creation number to go on below (the page filled, or the budget ran out; '' when no run
-- is left); damaged alternates the id and why of each run passed over because its hash is no
-- hash (a stray write: the caller names it, the others are listed). Indexes are scored by
-- creation number: newest created first. A record that does not decode passes the field
-- filters: the caller reads it, finds it damaged and says so.
local P = ARGV[1]
local keys = cjson.decode(ARGV[2])
local cursor, limit, budget = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local statuses = cjson.decode(ARGV[6])
local wanted = nil
if statuses ~= cjson.null then
  wanted = {}
  for _, s in ipairs(statuses) do wanted[s] = true end
end
local workflow, parent = ARGV[7], ARGV[8]
local fields = cjson.decode(ARGV[9] or '{}')
local function matches(rec)
  if next(fields) == nil then return true end
  local ok, record = pcall(cjson.decode, rec)
  if not ok or type(record) ~= 'table' then return true end
  for name, value in pairs(fields) do
    if record[name] ~= value then return false end
  end
  return true
end
local out, count, damaged = {}, 0, {}
while count < limit do
  if budget <= 0 then return {out, cursor, damaged} end
  local n = math.min(math.max(limit - count, 10), 500)
  local top = '+inf'
  if cursor ~= '' then top = '(' .. cursor end
  local batch, seen = {}, {}
  for _, key in ipairs(keys) do
    local got = redis.pcall('ZREVRANGEBYSCORE', P .. key, top, '-inf', 'WITHSCORES', 'LIMIT', 0, n)
    if got.err then
      -- An index of another type (a stray write): named, as damage.
      return redis.error_reply('WFDAMAGE ' .. P .. key .. ': ' .. got.err)
    end
    for i = 1, #got, 2 do
      if not seen[got[i]] then
        seen[got[i]] = true
        batch[#batch + 1] = {got[i], tonumber(got[i + 1])}
      end
    end
  end
  if #batch == 0 then break end
  table.sort(batch, function(a, b) return a[2] > b[2] end)
  for i = 1, math.min(n, #batch) do
    local id = batch[i][1]
    cursor = string.format('%d', batch[i][2])
    budget = budget - 1
    local f = redis.pcall('HMGET', P .. 'r:' .. id, 'st', 'wf', 'par', 'rec')
    if f.err then
      damaged[#damaged + 1] = id
      damaged[#damaged + 1] = P .. 'r:' .. id .. ': ' .. f.err
    elseif f[4] and (wanted == nil or wanted[f[1]]) and (workflow == '' or f[2] == workflow)
        and (parent == '' or f[3] == parent) and matches(f[4]) then
      out[#out + 1] = id
      out[#out + 1] = f[4]
      count = count + 1
      if count >= limit then return {out, cursor, damaged} end
    end
  end
end
return {out, '', damaged}
"""

DELETE_RUN = (
    _PRELUDE
    + """
-- ARGV: P, id, deleted_at (JSON number), reason. Returns the bytes freed, or -1: left alone
-- (not finished, or leased); a WFDAMAGE error, nothing deleted, when a key of its own or the
-- record of a hook token it holds cannot be read.
local id = ARGV[2]
local rk = rkey(id)
local function measure()
  local f = at(rk, 'HMGET', rk, 'st', 'wf', 'par', 'rec', 'seq')
  if not f[1] or not TERMINAL[f[1]] or not tonumber(f[5]) or not f[4] then return nil end
  local size = #f[4]
  local jk, sk = P .. 'j:' .. id, P .. 'sn:' .. id
  for _, e in ipairs(at(jk, 'LRANGE', jk, 0, -1)) do size = size + #e end
  local doomed = {rk, jk, P .. 'in:' .. id, sk, P .. 'lg:' .. id, P .. 'rh:' .. id}
  for _, name in ipairs(at(sk, 'HKEYS', sk)) do
    local key = P .. 'sc:' .. id .. ':' .. name
    for _, c in ipairs(at(key, 'LRANGE', key, 0, -1)) do size = size + #c end
    doomed[#doomed + 1] = key
  end
  local owned, hk = {}, P .. 'rh:' .. id
  for _, token in ipairs(at(hk, 'SMEMBERS', hk)) do
    if hook_owner(token) == id then owned[#owned + 1] = token end
  end
  return f, size, doomed, owned
end
local f, size, doomed, owned = replied(measure)
if type(f) == 'table' and f.err then return f end
if not f then return -1 end
if redis.call('EXISTS', P .. 'lease:' .. id) == 1 then return -1 end
for _, token in ipairs(owned) do redis.call('HDEL', P .. 'hooks', token) end
unqueue(rk)
local lane = redis.call('HMGET', rk, 'grp', 'lane')
if lane[1] and lane[1] ~= '' then redis.call('ZREM', P .. 'g:' .. lane[1], id) end
drop_index(id, f[1], f[2], f[3])
redis.call('DEL', unpack(doomed))
redis.call('HSET', P .. 'tomb', id, '{"id":' .. cjson.encode(id) .. ',"workflow":' ..
  cjson.encode(f[2]) .. ',"status":' .. cjson.encode(f[1]) .. ',"deleted_at":' .. ARGV[3] ..
  ',"reason":' .. cjson.encode(ARGV[4]) .. ',"seq":' .. f[5] .. '}')
redis.call('PUBLISH', P .. 'cr', id)
return size
"""
)

TRY_SLOT = """
-- ARGV: P, name, capacity, token, ttl (ms). Returns the place taken, or -1. A place the token
-- holds already (a first call whose reply was lost) is the one returned: sent again, the call
-- takes no second place.
local P, n = ARGV[1], tonumber(ARGV[3])
local base = P .. 'slot:' .. ARGV[2] .. ':'
for i = 0, n - 1 do
  if redis.call('GET', base .. i) == ARGV[4] then return i end
end
for i = 0, n - 1 do
  if redis.call('SET', base .. i, ARGV[4], 'NX', 'PX', ARGV[5]) then return i end
end
return -1
"""

SLOTS_TAKEN = """
-- ARGV: P, name, capacity.
local P, n = ARGV[1], 0
for i = 0, tonumber(ARGV[3]) - 1 do
  n = n + redis.call('EXISTS', P .. 'slot:' .. ARGV[2] .. ':' .. i)
end
return n
"""

TRY_RATE = """
-- ARGV: P, name, n, cutoff (starts at or before it are out of the window), now, count?, token.
-- Returns false when a start is allowed (and counted when count? is '1', as the member token:
-- ``UNCOUNT_RATE`` takes it back), else the oldest start in the window. A start the token
-- counted already (a first call whose reply was lost) is answered allowed: sent again, the
-- call counts no second start.
local P = ARGV[1]
local key = P .. 'rate:' .. ARGV[2]
if ARGV[6] == '1' and redis.call('ZSCORE', key, ARGV[7]) then return false end
local inside = redis.call('ZRANGEBYSCORE', key, '(' .. ARGV[4], '+inf', 'WITHSCORES')
if #inside / 2 >= tonumber(ARGV[3]) then return inside[2] end
if ARGV[6] == '1' then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[4])
  redis.call('ZADD', key, ARGV[5], ARGV[7])
end
return false
"""

UNCOUNT_RATE = """
-- ARGV: P, name, token, announcement. Takes back the start ``TRY_RATE`` counted as token (its
-- caller was cancelled before it heard: no run started), and announces it on the queue
-- channel: runs it held back meanwhile wait for the window's end, unless their workers hear.
local P = ARGV[1]
if redis.call('ZREM', P .. 'rate:' .. ARGV[2], ARGV[3]) == 1 then
  redis.call('PUBLISH', P .. 'cq', ARGV[4])
end
return 1
"""

_STATUSES = (
    "-- A status wf never writes (a stray write) names no index: ``ix:s:`` of it would be a\n"
    "-- new key nothing reads or cleans.\n"
    "local STATUSES = {" + ", ".join(f"{status.value} = true" for status in RunStatus) + "}\n"
)
"""The statuses a run can have, as a Lua set (for the scripts that repair the indexes)."""

REPAIR_LANES = """
-- ARGV: P, run ids... Puts each unfinished run of a lane (its hash's group ``grp`` and place
--       ``lane``) back in its lane key at its place when it is missing from it (the key
--       deleted by hand, or evicted). A hash or a lane key that cannot be read, or a place that
--       is no finite number, is left alone (verify names them). Returns {id, lane key}...
local P = ARGV[1]
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local f = redis.pcall('HMGET', P .. 'r:' .. id, 'grp', 'lane')
  local place = type(f) == 'table' and not f.err and f[1] and f[1] ~= '' and tonumber(f[2])
  if place and place == place and math.abs(place) ~= math.huge then
    local gk = P .. 'g:' .. f[1]
    local found = redis.pcall('ZSCORE', gk, id)
    if found == false then
      redis.call('ZADD', gk, f[2], id)
      out[#out + 1] = id
      out[#out + 1] = gk
    end
  end
end
return out
"""

REPAIR_INDEX = (
    _STATUSES
    + """
-- ARGV: P, index key (without the prefix: ix:all or ix:s:<status>), status ('' for ix:all),
--       members... Takes out of the index each member that is no run's (its hash is gone) or,
--       in a status index, a run of another status (put in its own status's index instead).
--       A hash that cannot be read is left alone (verify names it). Returns {member, why}...
local P, key, status = ARGV[1], ARGV[2], ARGV[3]
local out = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local rk = P .. 'r:' .. id
  local f = redis.pcall('HMGET', rk, 'st', 'seq')
  if type(f) == 'table' and not f.err then
    local why = nil
    if redis.call('EXISTS', rk) == 0 then
      why = 'no run has that id'
    elseif status ~= '' and f[1] and f[1] ~= status then
      why = 'the run is ' .. f[1]
      if tonumber(f[2]) and STATUSES[f[1]] then
        redis.call('ZADD', P .. 'ix:s:' .. f[1], f[2], id)
      end
    end
    if why then
      redis.call('ZREM', P .. key, id)
      out[#out + 1] = id
      out[#out + 1] = why
    end
  end
end
return out
"""
)

REPAIR_STATUS = (
    _STATUSES
    + """
-- ARGV: P, id. A run whose status field ``st`` disagrees with its record (a stray write): the
-- record is the truth, so ``st`` is set from it and the run moved from the status index of the
-- damaged field to its own. Returns {damaged st, status}; false when they agree (changed
-- meanwhile) or the record cannot be read (verify names it).
local P, id = ARGV[1], ARGV[2]
local rk = P .. 'r:' .. id
local f = redis.pcall('HMGET', rk, 'st', 'rec', 'seq')
if type(f) ~= 'table' or f.err or not f[2] then return false end
local ok, rec = pcall(cjson.decode, f[2])
if not ok or type(rec) ~= 'table' then return false end
local status = rec['status']
if type(status) ~= 'string' or not STATUSES[status] or status == f[1] then return false end
local old = f[1] or ''
redis.call('HSET', rk, 'st', status)
if STATUSES[old] then redis.pcall('ZREM', P .. 'ix:s:' .. old, id) end
if tonumber(f[3]) then redis.pcall('ZADD', P .. 'ix:s:' .. status, f[3], id) end
return {old, status}
"""
)

REPAIR_LISTED = (
    _STATUSES
    + """
-- ARGV: P, ids... Puts each run back in the listings' indexes it is missing from (its status's
-- ``ix:s:``, its workflow's ``ix:w:``, its parent's ``ix:p:``), as read now: a run written while
-- one was of another type (a stray write; the runs' scripts write the indexes with pcall) was
-- left out of it. A run whose hash cannot be read, or with no creation number, is left alone
-- (verify names it). Returns {what, key, detail}...: what is 'added' (detail: the run's id) or
-- 'type' (the index is of another type, detail: the server's error; named, not changed).
local P = ARGV[1]
local out, named = {}, {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local f = redis.pcall('HMGET', P .. 'r:' .. id, 'st', 'wf', 'par', 'seq')
  if type(f) == 'table' and not f.err and f[4] and string.match(f[4], '^%d+$') then
    local keys = {}
    if f[1] and STATUSES[f[1]] then keys[#keys + 1] = P .. 'ix:s:' .. f[1] end
    if f[2] then keys[#keys + 1] = P .. 'ix:w:' .. f[2] end
    if f[3] and f[3] ~= '' then keys[#keys + 1] = P .. 'ix:p:' .. f[3] end
    for _, key in ipairs(keys) do
      local score = redis.pcall('ZSCORE', key, id)
      if type(score) == 'table' and score.err then
        if not named[key] then
          named[key] = true
          out[#out + 1] = 'type'; out[#out + 1] = key; out[#out + 1] = score.err
        end
      elseif not score then
        redis.call('ZADD', key, f[4], id)
        out[#out + 1] = 'added'; out[#out + 1] = key; out[#out + 1] = id
      end
    end
  end
end
return out
"""
)

REPAIR_QUEUE = """
-- ARGV: P, id, queue key (the run's qk, as verify read it), due score. A run whose qk names a
-- queue it is not in: a finished run's qk is cleared; a live run is put back in that queue
-- (due then). Nothing is done when the run changed meanwhile. Returns 1 if repaired.
local P, id, qk = ARGV[1], ARGV[2], ARGV[3]
local rk = P .. 'r:' .. id
local f = redis.pcall('HMGET', rk, 'st', 'qk', 'qm')
if type(f) ~= 'table' or f.err or f[2] ~= qk or qk == '' or not f[3] then return 0 end
if redis.call('ZSCORE', P .. 'q:' .. qk, f[3]) then return 0 end
if f[1] == 'completed' or f[1] == 'failed' or f[1] == 'cancelled' then
  redis.call('HSET', rk, 'qk', '')
  return 1
end
local bar = string.find(qk, '|', 1, true)
if not bar then return 0 end
redis.call('ZADD', P .. 'q:' .. qk, ARGV[4], f[3])
redis.call('ZADD', P .. 'qk', string.sub(qk, 1, bar - 1), qk)
redis.call('PUBLISH', P .. 'cq', id)
return 1
"""

REPAIR_QUEUE_INDEX = """
-- ARGV: P, queue name (``<priority>|<rest>``), its priority. A queue missing from the queues'
-- index ``qk`` put back in it, when it still has runs (a run that ended meanwhile may have
-- emptied it: an empty queue is never indexed). Returns 1 if put back.
local P, qk = ARGV[1], ARGV[2]
local q = P .. 'q:' .. qk
if redis.call('TYPE', q).ok ~= 'zset' or redis.call('ZCARD', q) == 0 then return 0 end
return redis.call('ZADD', P .. 'qk', 'NX', ARGV[3], qk)
"""

REPAIR_MEMBER = """
-- ARGV: P, id, the run's queue member (its creation number, 16 digits, and its id). A run
-- whose queue member field ``qm`` a stray write damaged: set right, and its queue's entry
-- under the damaged member (one verify put back, or a post queued) moved to the right one;
-- when the right member has an entry too, the earlier score of the two is kept (a run waiting
-- on a hook at +inf that a post queued under the damaged member is due). Returns the damaged
-- member (false if it was right meanwhile).
local P, id, member = ARGV[1], ARGV[2], ARGV[3]
local rk = P .. 'r:' .. id
local f = redis.pcall('HMGET', rk, 'qm', 'qk')
if type(f) ~= 'table' or f.err or f[1] == member then return false end
local old = f[1] or ''
redis.call('HSET', rk, 'qm', member)
if f[2] and f[2] ~= '' then
  local qk = P .. 'q:' .. f[2]
  if redis.call('TYPE', qk).ok == 'zset' then
    local score = redis.call('ZSCORE', qk, old)
    if score then
      redis.call('ZREM', qk, old)
      local kept = redis.call('ZSCORE', qk, member)
      if not kept or tonumber(score) < tonumber(kept) then
        redis.call('ZADD', qk, score, member)
      end
    end
  end
end
return old
"""

_SCHEDULES = """
local function schedule_keys() return P .. 'sched', P .. 'snext' end
-- The next fire time a schedule's JSON names: a number, nil when it has none (paused, its
-- series ended), and 0 (due) when the JSON cannot be read, so a worker's pass meets the
-- damage and names it, as it would on a store that reads every schedule (then a second
-- value, true, says it was damage).
local function next_fire(raw)
  local ok, found = pcall(cjson.decode, raw)
  if not ok or type(found) ~= 'table' then return 0, true end
  local at = found['next_run']
  if at == nil or at == cjson.null then return nil end
  if type(at) ~= 'number' or at ~= at then return 0, true end
  return at
end
"""

SAVE_SCHEDULE = (
    _PRELUDE
    + _SCHEDULES
    + """
-- ARGV: P, id, schedule JSON, next fire time ('' for none), change signal. The schedule and
-- its place in the index of next fires, together; both keys are read before either is written.
return replied(function()
  local sk, nk = schedule_keys()
  local id = ARGV[2]
  at(sk, 'HEXISTS', sk, id)
  at(nk, 'ZSCORE', nk, id)
  redis.call('HSET', sk, id, ARGV[3])
  if ARGV[4] == '' then redis.call('ZREM', nk, id) else redis.call('ZADD', nk, ARGV[4], id) end
  redis.call('PUBLISH', P .. 'cq', ARGV[5])
  return 1
end)
"""
)
"""A schedule created or replaced, and its next fire in ``snext``."""

DELETE_SCHEDULE = (
    _PRELUDE
    + _SCHEDULES
    + """
-- ARGV: P, id, change signal. Returns 1 if there was a schedule of that id.
return replied(function()
  local sk, nk = schedule_keys()
  local id = ARGV[2]
  at(sk, 'HEXISTS', sk, id)
  at(nk, 'ZSCORE', nk, id)
  local removed = redis.call('HDEL', sk, id)
  redis.call('ZREM', nk, id)
  redis.call('PUBLISH', P .. 'cq', ARGV[3])
  return removed
end)
"""
)

DUE_SCHEDULES = (
    _PRELUDE
    + _SCHEDULES
    + """
-- ARGV: P, now. Returns {{id, schedule JSON}..., the earliest next fire after now or false}:
-- the schedules due by now from the index of next fires, and no other schedule read. An
-- index member whose schedule is gone is passed over (the look, ``INDEX_SCHEDULES``, or
-- ``wf store verify`` takes it out).
return replied(function()
  local sk, nk = schedule_keys()
  local due = at(nk, 'ZRANGEBYSCORE', nk, '-inf', ARGV[2])
  local out = {}
  for _, id in ipairs(due) do
    local raw = at(sk, 'HGET', sk, id)
    if raw then
      out[#out + 1] = id
      out[#out + 1] = raw
    end
  end
  local later = at(nk, 'ZRANGEBYSCORE', nk, '(' .. ARGV[2], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return {out, later[2] or false}
end)
"""
)

INDEX_SCHEDULES = (
    _PRELUDE
    + _SCHEDULES
    + """
-- ARGV: P, HSCAN cursor, COUNT (a hint), '1' to keep a damaged schedule's place. One slice of
-- making the index of next fires agree with the schedules (``RedisStore._index_schedules``):
-- the schedules HSCAN returns from the cursor, each put (back) at the time its JSON names
-- (taken out when it names none). ``keep_damaged``: a damaged schedule already in the index
-- keeps its place (met when it comes due, not moved to 0 by every worker's look). A slice,
-- not the whole hash: a script holds the whole server while it runs. Each slice is right on
-- its own: it reads each schedule and its place together, and a schedule saved between two
-- slices moved its place in its own script. Returns {the next cursor ('0': done), {id, what
-- was done}...}.
return replied(function()
  local sk, nk = schedule_keys()
  local found = at(sk, 'HSCAN', sk, ARGV[2], 'COUNT', ARGV[3])
  local fields, out = found[2], {}
  at(nk, 'ZCARD', nk) -- the index of another type is named before anything is written
  for i = 1, #fields, 2 do
    local id = fields[i]
    local fire, damaged = next_fire(fields[i + 1])
    local was = redis.call('ZSCORE', nk, id)
    was = was and tonumber(was) or nil
    if damaged and ARGV[4] == '1' and was ~= nil then
      fire = was
    end
    if fire == nil and was ~= nil then
      redis.call('ZREM', nk, id)
      out[#out + 1] = id
      out[#out + 1] = 'taken out (it has no next fire)'
    elseif fire ~= nil and was ~= fire then
      redis.call('ZADD', nk, fire, id)
      out[#out + 1] = id
      out[#out + 1] = was == nil and 'put back in it' or 'moved to its next fire'
    end
  end
  return {found[1], out}
end)
"""
)
"""One slice of the index of next fires made to agree with the schedules."""

UNINDEX_STRAYS = (
    _PRELUDE
    + _SCHEDULES
    + """
-- ARGV: P, ZSCAN cursor, COUNT (a hint). One slice of taking out of the index of next fires
-- each member that is no schedule's (the other half of ``INDEX_SCHEDULES``). Returns {the
-- next cursor ('0': done), {id, what was done}...}.
return replied(function()
  local sk, nk = schedule_keys()
  local found = at(nk, 'ZSCAN', nk, ARGV[2], 'COUNT', ARGV[3])
  local members, out = found[2], {}
  at(sk, 'HLEN', sk) -- the schedules' hash of another type is named before any write
  for i = 1, #members, 2 do
    local id = members[i]
    if redis.call('HEXISTS', sk, id) == 0 then
      redis.call('ZREM', nk, id)
      out[#out + 1] = id
      out[#out + 1] = 'removed from it (no schedule has that id)'
    end
  end
  return {found[1], out}
end)
"""
)
"""One slice of the members of the index of next fires that are no schedule's taken out."""

UPGRADE = (
    _PRELUDE
    + _SCHEDULES
    + """
-- ARGV: P, the format this code writes. A store of format 1 gets its schedules indexed by
-- next fire (``snext``), then its format key says the new format. Idempotent: a store of
-- the new format (or a newer one) is left alone. Returns {the store's format after it, the
-- one before} (the same twice when it was left alone; nil when it has no format number).
return replied(function()
  local fk = P .. 'format'
  local found = tonumber(redis.call('GET', fk))
  local to = tonumber(ARGV[2])
  if found == nil then return nil end
  if found >= to then return {found, found} end
  local sk, nk = schedule_keys()
  local all = at(sk, 'HGETALL', sk)
  at(nk, 'ZCARD', nk)
  for i = 1, #all, 2 do
    local fire = next_fire(all[i + 1])
    if fire ~= nil then redis.call('ZADD', nk, fire, all[i]) end
  end
  redis.call('SET', fk, to)
  return {to, found}
end)
"""
)
"""The key layout brought up to date when a store of an older format is opened."""
