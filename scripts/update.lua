-- update: installs the firmware or package the task pins as its artifact "firmware"
-- (the task's "artifacts": {"firmware": "sha256:..."}), reboots into it, checks that the
-- device runs it and works, and rolls back otherwise (docs/lua-api.md, "A job across a
-- reboot"). The agent downloads the artifact before this script starts and verifies it
-- against the size and SHA-256 that the task's signature covers (docs/lua-api.md,
-- "rcs.artifacts"); nothing of it comes from the job's variables, which are not signed.
-- Commands the device allowlists:
--   install  NAME=PATH of a program taking (file) that installs it (copying the file:
--            it stays in the agent's cache)
--   version  (optional) prints the version the device runs; without it, or without the
--            constant version, the running version is not checked
--   health   (optional) exits 0 when the device works
-- and its rollback_command (rcs.rollback) that goes back to the previous version; without
-- one a failed check ends the job health_check_failed instead of rolled_back.
-- constants: version (string, optional): the version the firmware brings (signed with the
--            task, unlike variables)
-- variables: reboot (boolean, optional): true reboots into the new version and checks it
--            (the whole sequence); without it the firmware is installed only, as before;
--            within (integer, optional, 30-86400, default 900): the seconds the device has
--            to come back after its reboot

-- a failed check: back to the previous version (and reboot into it), or say it failed
local function roll_back(why)
  local ok, err = pcall(rcs.rollback, why, { reboot = true })
  rcs.log("warn", "no rollback: " .. tostring(err))
  rcs.fail("health_check_failed", why)
end

if rcs.job.phase == nil then
  -- phase 1 (rcs.job.phase is nil): fetch (the agent did) and install
  local fw = rcs.artifacts.firmware
  if fw == nil then
    error("the task pins no artifact named firmware")
  end
  rcs.progress("installing " .. fw.sha256:sub(1, 12))
  local inst = rcs.exec("install", fw.path)
  if inst.code ~= 0 then
    rcs.fail("install_failed", "install failed: " .. inst.output)
  end
  if rcs.variables.reboot ~= true then
    return { installed = fw.sha256, size = fw.size, reboot = false }
  end
  -- what the next phase checks, kept across the reboot
  rcs.state.set("expect", rcs.constants.version or "")
  rcs.state.set("installed", fw.sha256)
  rcs.reboot{ resume = "verify", within = rcs.variables.within or 900 }
end

-- phase "verify", after the reboot: the device must run the new version, and work
if not rcs.job.rebooted then
  rcs.log("warn", "the device did not reboot: checking all the same")
end
local expect = rcs.state.get("expect")
local running = nil
local ok, v = pcall(rcs.exec, "version")
if ok and v.code == 0 then
  running = v.output:match("^%s*(.-)%s*$")
end
if expect ~= "" and running ~= nil and running ~= expect then
  roll_back("the device runs " .. running .. ", not " .. expect)
end
local hok, h = pcall(rcs.exec, "health")
if hok and h.code ~= 0 then
  roll_back("health check failed: " .. h.output)
end
return { installed = rcs.state.get("installed"), version = running,
         rebooted = rcs.job.rebooted }
