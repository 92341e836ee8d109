-- echo: returns its variable `message` (or "pong"), to check a device end to end.
-- variables: message (string, optional)
local msg = rcs.variables.message
if msg == nil then
  msg = "pong"
end
return msg
