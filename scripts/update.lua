-- update: installs the firmware or package the task pins as its artifact "firmware"
-- (the task's "artifacts": {"firmware": "sha256:..."}). The agent downloads it before
-- this script starts and verifies it against the size and SHA-256 that the task's
-- signature covers (docs/lua-api.md, "rcs.artifacts"); nothing of it comes from the
-- job's variables, which are not signed. It is installed through a command the device
-- allowlists:
--   install  NAME=PATH of a program taking (file) that installs it (copying the file:
--            it stays in the agent's cache)
-- variables: reboot (boolean, optional)
local fw = rcs.artifacts.firmware
if fw == nil then
  error("the task pins no artifact named firmware")
end
rcs.progress("installing " .. fw.sha256:sub(1, 12))
local inst = rcs.exec("install", fw.path)
if inst.code ~= 0 then
  error("install failed: " .. inst.output)
end
local reboot = rcs.variables.reboot == true
if reboot then
  rcs.reboot()
end
return { installed = fw.sha256, size = fw.size, reboot = reboot }
