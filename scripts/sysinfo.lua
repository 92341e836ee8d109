-- sysinfo: reports what the device is: agent view of time, and the output of
-- the allowlisted commands "uname" and "uptime" when the device allows them.
-- variables: none
local info = { time = os.time(), job = rcs.job.ident }
for _, name in ipairs({ "uname", "uptime" }) do
  local ok, res = pcall(rcs.exec, name, name == "uname" and "-a" or nil)
  if ok and res.code == 0 then
    info[name] = (res.output:gsub("%s+$", ""))
  end
end
return info
