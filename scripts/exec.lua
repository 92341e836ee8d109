-- exec: runs one command the device allowlists (agent option allow_command
-- NAME=PATH), with arguments passed as they are (no shell), and returns its
-- exit code and output.
-- variables: command (string), args (string, optional: space-separated words)
local cmd = rcs.variables.command
if type(cmd) ~= "string" or cmd == "" then
  error("variable 'command' is required")
end
local args = {}
for word in string.gmatch(rcs.variables.args or "", "%S+") do
  args[#args + 1] = word
end
local res = rcs.exec(cmd, table.unpack(args))
if res.code ~= 0 then
  error(string.format("%s exited with %d: %s", cmd, res.code, res.output))
end
return { code = res.code, output = res.output }
