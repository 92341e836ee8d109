-- reboot: restarts the device once this job's final report has reached the
-- broker (the agent runs its configured reboot_command then).
-- variables: delay (integer, optional): seconds to wait first (at most 300)
local delay = rcs.variables.delay or 0
if delay > 300 then
  error("delay must be at most 300 seconds")
end
if delay > 0 then
  rcs.progress("rebooting in " .. delay .. " s")
  rcs.sleep(delay)
end
rcs.reboot()
return "reboot scheduled"
