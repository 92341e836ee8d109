-- update: fetches and installs a firmware or package update through two
-- commands the device allowlists:
--   fetch   NAME=PATH of a program taking (url, destination) that downloads a file
--   install NAME=PATH of a program taking (file) that installs it
-- The downloaded file must be inside a directory of the agent's file_dir, and
-- its SHA-256 must match before anything is installed.
-- variables: url (string), sha256 (string, 64 hex), file (string: path relative
--            to the first file_dir, e.g. "update.bin"), reboot (boolean, optional)
local v = rcs.variables
if not (v.url and v.sha256 and v.file) then
  error("variables url, sha256 and file are required")
end
if not v.sha256:match("^%x+$") or #v.sha256 ~= 64 then
  error("sha256 must be 64 hex characters")
end
rcs.progress("downloading " .. v.url)
local got = rcs.exec("fetch", v.url, v.file)
if got.code ~= 0 then
  error("download failed: " .. got.output)
end
rcs.progress("checking")
local sum = rcs.exec("sha256sum", v.file)
if sum.code ~= 0 then
  error("cannot hash " .. v.file .. ": " .. sum.output)
end
local actual = sum.output:match("^(%x+)")
if actual == nil or actual:lower() ~= v.sha256:lower() then
  error("sha256 mismatch: expected " .. v.sha256 .. ", got " .. tostring(actual))
end
rcs.progress("installing")
local inst = rcs.exec("install", v.file)
if inst.code ~= 0 then
  error("install failed: " .. inst.output)
end
if v.reboot then
  rcs.reboot()
end
return { installed = v.file, sha256 = actual, reboot = v.reboot == true }
