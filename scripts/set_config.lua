-- set_config: writes one persisted device setting and returns its previous value.
-- variables: key (string), value (string)
local key, value = rcs.variables.key, rcs.variables.value
if type(key) ~= "string" or key == "" then
  error("variable 'key' is required")
end
if type(value) ~= "string" then
  error("variable 'value' must be a string")
end
local previous = rcs.config.get(key)
rcs.config.set(key, value)
rcs.log("info", "setting " .. key .. " changed")
return { key = key, previous = previous, value = value }
