-- get_config: reads persisted device settings.
-- variables: key (string, optional): one setting; without it, the keys listed
--            in the constant `keys` (an array), or nothing.
local key = rcs.variables.key
if key ~= nil then
  return { [key] = rcs.config.get(key) }
end
local out = {}
for _, k in ipairs(rcs.constants.keys or {}) do
  out[k] = rcs.config.get(k)
end
return out
